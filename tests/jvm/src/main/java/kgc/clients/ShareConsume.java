package kgc.clients;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One KafkaShareConsumer (KIP-932) in a share group, driven by its options and by commands on
 * standard input.
 *
 * <p>Options (besides {@link Cli}'s): {@code --group G}; {@code --topics a,b}; {@code --mode
 * implicit|explicit} (share.acknowledgement.mode; implicit accepts what the previous poll
 * returned); in explicit mode, which offsets are not accepted: {@code --release-first 3,4}
 * (RELEASE on their first delivery, ACCEPT after), {@code --release-always 7} (RELEASE every
 * time), {@code --reject 5} (REJECT); {@code --hold true} (acknowledge nothing, keep the
 * records until halted); {@code --timeout-ms T} (stop after T ms, default 60000). After each
 * poll that returned records, commitSync (unless holding).
 *
 * <p>Commands, one per line: {@code close} (close the consumer), {@code halt} (exit at once,
 * as a crash). Events (JSON lines, field {@code event}): started, record (topic, partition,
 * offset, key, value, delivery_count, ack), committed (errors: what failed), done ({@code
 * reason}), closed, error.
 */
public final class ShareConsume {
  private final Cli cli;
  private final KafkaShareConsumer<String, String> consumer;
  private final LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
  private final boolean explicit;
  private final boolean hold;
  private final Set<Long> releaseFirst;
  private final Set<Long> releaseAlways;
  private final Set<Long> reject;

  private ShareConsume(Cli cli) {
    this.cli = cli;
    Properties p = cli.clientProps();
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    p.put("group.id", cli.require("group"));
    this.explicit = cli.get("mode", "implicit").equals("explicit");
    p.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
    this.hold = cli.get("hold", "false").equals("true");
    this.releaseFirst = offsets(cli.get("release-first", ""));
    this.releaseAlways = offsets(cli.get("release-always", ""));
    this.reject = offsets(cli.get("reject", ""));
    this.consumer = new KafkaShareConsumer<>(p);
  }

  static Set<Long> offsets(String list) {
    if (list.isEmpty()) {
      return new HashSet<>();
    }
    return Arrays.stream(list.split(",")).map(Long::parseLong).collect(Collectors.toSet());
  }

  private AcknowledgeType decide(ConsumerRecord<String, String> r, short count) {
    if (reject.contains(r.offset())) {
      return AcknowledgeType.REJECT;
    }
    if (releaseAlways.contains(r.offset()) || (releaseFirst.contains(r.offset()) && count == 1)) {
      return AcknowledgeType.RELEASE;
    }
    return AcknowledgeType.ACCEPT;
  }

  private void handle(ConsumerRecords<String, String> batch) {
    for (ConsumerRecord<String, String> r : batch) {
      short count = r.deliveryCount().orElse((short) -1);
      ObjectNode n = Cli.event("record");
      n.put("topic", r.topic());
      n.put("partition", r.partition());
      n.put("offset", r.offset());
      n.put("key", r.key());
      n.put("value", r.value());
      n.put("delivery_count", count);
      if (explicit && !hold) {
        AcknowledgeType ack = decide(r, count);
        consumer.acknowledge(r, ack);
        n.put("ack", ack.name());
      }
      Cli.emit(n);
    }
    if (!batch.isEmpty() && !hold) {
      Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
      ObjectNode c = Cli.event("committed");
      ObjectNode errors = c.putObject("errors");
      result.forEach(
          (tip, err) ->
              err.ifPresent(e -> errors.put(tip.topic() + "-" + tip.partition(), e.toString())));
      Cli.emit(c);
    }
  }

  private void run() throws InterruptedException {
    Cli.readCommands(commands);
    long deadline = System.currentTimeMillis() + cli.getInt("timeout-ms", 60000);
    consumer.subscribe(Arrays.asList(cli.require("topics").split(",")));
    Cli.emit(Cli.event("started"));
    boolean holding = false;
    while (true) {
      if (!holding) {
        ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
        handle(batch);
        // Holding: the records stay acquired (no further poll) until halted or closed.
        holding = hold && !batch.isEmpty();
      }
      String line;
      while ((line = holding ? commands.take() : commands.poll()) != null) {
        switch (line.trim()) {
          case "close" -> {
            Cli.emit(Cli.event("done").put("reason", "command"));
            consumer.close();
            Cli.emit(Cli.event("closed"));
            return;
          }
          case "halt" -> Runtime.getRuntime().halt(0);
          default -> {}
        }
      }
      if (System.currentTimeMillis() > deadline) {
        Cli.emit(Cli.event("done").put("reason", "timeout"));
        consumer.close();
        Cli.emit(Cli.event("closed"));
        return;
      }
    }
  }

  public static void main(String[] args) throws Exception {
    ShareConsume c;
    try {
      c = new ShareConsume(new Cli(args));
    } catch (Exception e) {
      ObjectNode n = Cli.event("error");
      Cli.putError(n, e);
      Cli.emit(n);
      System.exit(2);
      return;
    }
    try {
      c.run();
    } catch (Exception e) {
      ObjectNode n = Cli.event("error");
      Cli.putError(n, e);
      Cli.emit(n);
      System.exit(1);
    }
    System.exit(0);
  }
}
