package kgc.clients;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One KafkaConsumer in a group, driven by its options and by commands on standard input.
 *
 * <p>Options (besides {@link Cli}'s): {@code --group G}; {@code --topics a,b} or {@code
 * --pattern REGEX} ({@code subscribe(Pattern)}, resolved by the client) or {@code --re2-pattern
 * REGEX} ({@code subscribe(SubscriptionPattern)}, resolved by the broker; consumer protocol
 * only); {@code --protocol classic|consumer}; {@code --assignor NAME} (classic: range,
 * roundrobin, sticky, cooperative-sticky as partition.assignment.strategy; consumer: the
 * group.remote.assignor); {@code --instance-id ID} (static membership); {@code --client-id};
 * {@code --commit sync|none} (sync: commitSync after every poll that returned records);
 * {@code --max-records N} (stop after N records); {@code --timeout-ms T} (stop after T ms,
 * default 60000).
 *
 * <p>Commands, one per line on standard input: {@code status} (assignment and group
 * metadata), {@code commit} (commitSync of the position), {@code committed} (the group's
 * committed offsets of the assignment), {@code close} (close, leaving the group as the client
 * does by default), {@code close-remain} (close with REMAIN_IN_GROUP), {@code halt} (exit at
 * once, as a crash: no leave). End of input is ignored.
 *
 * <p>Events (JSON lines, field {@code event}): started, assigned, revoked, lost (each with
 * {@code partitions} [[topic, partition]...] and the member's {@code generation}/{@code
 * member_id}), record, committed, status, done ({@code reason}: max-records, timeout, command),
 * closed, error.
 */
public final class Consume {
  private final Cli cli;
  private final KafkaConsumer<String, String> consumer;
  private final LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
  private final boolean commitSync;
  private long records;

  private Consume(Cli cli) {
    this.cli = cli;
    Properties p = cli.clientProps();
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    p.putIfAbsent("auto.offset.reset", "earliest");
    p.putIfAbsent("enable.auto.commit", "false");
    p.put("group.id", cli.require("group"));
    String protocol = cli.get("protocol", "classic");
    p.put("group.protocol", protocol);
    String assignor = cli.get("assignor", null);
    if (assignor != null) {
      if (protocol.equals("consumer")) {
        p.put("group.remote.assignor", assignor);
      } else {
        p.put("partition.assignment.strategy", classicAssignor(assignor));
      }
    }
    String instance = cli.get("instance-id", null);
    if (instance != null) {
      p.put("group.instance.id", instance);
    }
    String clientId = cli.get("client-id", null);
    if (clientId != null) {
      p.put("client.id", clientId);
    }
    this.commitSync = cli.get("commit", "sync").equals("sync");
    this.consumer = new KafkaConsumer<>(p);
  }

  static String classicAssignor(String name) {
    String pkg = "org.apache.kafka.clients.consumer.";
    return switch (name) {
      case "range" -> pkg + "RangeAssignor";
      case "roundrobin" -> pkg + "RoundRobinAssignor";
      case "sticky" -> pkg + "StickyAssignor";
      case "cooperative-sticky" -> pkg + "CooperativeStickyAssignor";
      default -> name;
    };
  }

  static ArrayNode partitions(Collection<TopicPartition> tps) {
    ArrayNode a = Cli.JSON.createArrayNode();
    tps.stream()
        .sorted(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition))
        .forEach(tp -> a.addArray().add(tp.topic()).add(tp.partition()));
    return a;
  }

  private ObjectNode withMember(ObjectNode n) {
    ConsumerGroupMetadata m = consumer.groupMetadata();
    n.put("generation", m.generationId());
    n.put("member_id", m.memberId());
    n.put("instance_id", m.groupInstanceId().orElse(null));
    return n;
  }

  private final ConsumerRebalanceListener listener =
      new ConsumerRebalanceListener() {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> tps) {
          Cli.emit(withMember(Cli.event("revoked")).set("partitions", partitions(tps)));
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> tps) {
          ObjectNode n = withMember(Cli.event("assigned"));
          n.set("partitions", partitions(tps));
          n.set("assignment", partitions(consumer.assignment()));
          Cli.emit(n);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> tps) {
          Cli.emit(withMember(Cli.event("lost")).set("partitions", partitions(tps)));
        }
      };

  private void subscribe() {
    String topics = cli.get("topics", null);
    String pattern = cli.get("pattern", null);
    String re2 = cli.get("re2-pattern", null);
    if (topics != null) {
      consumer.subscribe(Arrays.asList(topics.split(",")), listener);
    } else if (pattern != null) {
      consumer.subscribe(Pattern.compile(pattern), listener);
    } else if (re2 != null) {
      consumer.subscribe(new SubscriptionPattern(re2), listener);
    } else {
      throw new IllegalArgumentException("--topics, --pattern or --re2-pattern is required");
    }
  }

  private void commit() {
    Map<TopicPartition, OffsetAndMetadata> offsets =
        consumer.assignment().stream()
            .collect(
                Collectors.toMap(tp -> tp, tp -> new OffsetAndMetadata(consumer.position(tp))));
    consumer.commitSync(offsets);
    Cli.emit(Cli.event("committed").set("offsets", offsetList(offsets)));
  }

  static ArrayNode offsetList(Map<TopicPartition, OffsetAndMetadata> offsets) {
    ArrayNode a = Cli.JSON.createArrayNode();
    offsets.entrySet().stream()
        .sorted(
            Comparator.comparing((Map.Entry<TopicPartition, OffsetAndMetadata> e) -> e.getKey().topic())
                .thenComparing(e -> e.getKey().partition()))
        .forEach(
            e ->
                a.addArray()
                    .add(e.getKey().topic())
                    .add(e.getKey().partition())
                    .add(e.getValue() == null ? null : e.getValue().offset()));
    return a;
  }

  /** Runs a command; true when the consumer is to stop. */
  private boolean command(String line) {
    switch (line.trim()) {
      case "status" -> {
        ObjectNode n = withMember(Cli.event("status"));
        n.set("assignment", partitions(consumer.assignment()));
        n.put("records", records);
        Cli.emit(n);
        return false;
      }
      case "commit" -> {
        commit();
        return false;
      }
      case "committed" -> {
        Set<TopicPartition> tps = consumer.assignment();
        Cli.emit(Cli.event("committed_read").set("offsets", offsetList(consumer.committed(tps))));
        return false;
      }
      case "close", "close-remain" -> {
        Cli.emit(Cli.event("done").put("reason", "command").put("records", records));
        CloseOptions.GroupMembershipOperation op =
            line.trim().equals("close")
                ? CloseOptions.GroupMembershipOperation.DEFAULT
                : CloseOptions.GroupMembershipOperation.REMAIN_IN_GROUP;
        consumer.close(CloseOptions.groupMembershipOperation(op));
        Cli.emit(Cli.event("closed"));
        return true;
      }
      case "halt" -> {
        Runtime.getRuntime().halt(0);
        return true;
      }
      case "" -> {
        return false;
      }
      default -> {
        Cli.emit(Cli.event("error").put("message", "unknown command " + line));
        return false;
      }
    }
  }

  private void run() throws InterruptedException {
    Cli.readCommands(commands);
    long max = cli.getInt("max-records", 0);
    long deadline = System.currentTimeMillis() + cli.getInt("timeout-ms", 60000);
    subscribe();
    Cli.emit(Cli.event("started"));
    while (true) {
      ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
      for (ConsumerRecord<String, String> r : batch) {
        records++;
        ObjectNode n = Cli.event("record");
        n.put("topic", r.topic());
        n.put("partition", r.partition());
        n.put("offset", r.offset());
        n.put("key", r.key());
        n.put("value", r.value());
        Cli.emit(n);
      }
      if (!batch.isEmpty() && commitSync) {
        commit();
      }
      String line;
      while ((line = commands.poll()) != null) {
        if (command(line)) {
          return;
        }
      }
      boolean full = max > 0 && records >= max;
      if (full || System.currentTimeMillis() > deadline) {
        Cli.emit(
            Cli.event("done").put("reason", full ? "max-records" : "timeout").put("records", records));
        consumer.close();
        Cli.emit(Cli.event("closed"));
        return;
      }
    }
  }

  public static void main(String[] args) throws Exception {
    Consume c = new Consume(new Cli(args));
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
