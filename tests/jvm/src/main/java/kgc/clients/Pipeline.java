package kgc.clients;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Exactly-once consume-transform-produce with the Java client: a read_committed KafkaConsumer of
 * group {@code --group} on {@code --input}, a KafkaProducer with {@code --transactional-id}
 * writing each input record (key, value) to {@code --output}, one transaction per poll batch
 * with the consumed positions committed by sendOffsetsToTransaction(offsets, groupMetadata).
 *
 * <p>Any failure (the server killed and restarted under it, a rebalance fencing the offsets)
 * aborts what can be aborted, closes both clients and starts over with new ones: the new
 * producer's initTransactions fences the old one and aborts its open transaction, and the new
 * consumer resumes from the committed offsets. It runs until a line arrives on standard input.
 *
 * <p>Events: {@code txn} (records of the committed transaction, committed so far), {@code
 * restart} (the failure's class), {@code done}.
 */
public final class Pipeline {
  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    String input = cli.require("input");
    String output = cli.require("output");
    String group = cli.require("group");
    String txnId = cli.require("transactional-id");
    AtomicBoolean stop = new AtomicBoolean();
    Thread stdin =
        new Thread(
            () -> {
              try {
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
                    .readLine();
              } catch (java.io.IOException ignored) {
                // stdin closed: stop as well
              }
              stop.set(true);
            });
    stdin.setDaemon(true);
    stdin.start();
    long committed = 0;
    while (!stop.get()) {
      try (KafkaConsumer<String, String> consumer = consumer(cli, group);
          KafkaProducer<String, String> producer = producer(cli, txnId)) {
        consumer.subscribe(List.of(input));
        producer.initTransactions();
        while (!stop.get()) {
          ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
          if (records.isEmpty()) {
            continue;
          }
          producer.beginTransaction();
          Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
          for (ConsumerRecord<String, String> r : records) {
            producer.send(new ProducerRecord<>(output, r.key(), r.value()));
            offsets.put(
                new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
          }
          try {
            producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            producer.commitTransaction();
          } catch (RuntimeException e) {
            try {
              producer.abortTransaction();
            } catch (RuntimeException ignored) {
              // a fenced or failed producer cannot abort: the next one's init does
            }
            throw e;
          }
          committed += records.count();
          ObjectNode n = Cli.event("txn");
          n.put("records", records.count());
          n.put("committed", committed);
          Cli.emit(n);
        }
      } catch (RuntimeException e) {
        ObjectNode n = Cli.event("restart");
        Cli.putError(n, e);
        Cli.emit(n);
      }
    }
    Cli.emit(Cli.event("done").put("ok", true));
    System.exit(0);
  }

  private static KafkaConsumer<String, String> consumer(Cli cli, String group) {
    Properties p = cli.clientProps();
    p.put("group.id", group);
    p.put("isolation.level", "read_committed");
    p.put("enable.auto.commit", "false");
    p.put("auto.offset.reset", "earliest");
    p.put("max.poll.records", "100");
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    return new KafkaConsumer<>(p);
  }

  private static KafkaProducer<String, String> producer(Cli cli, String txnId) {
    Properties p = cli.clientProps();
    p.put("transactional.id", txnId);
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    return new KafkaProducer<>(p);
  }
}
