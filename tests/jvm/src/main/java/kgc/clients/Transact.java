package kgc.clients;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional KafkaProducer: {@code --txns M} transactions of {@code --count N} records each
 * into partition {@code --partition P} of {@code --topic T}, every {@code --abort-every K}-th one
 * aborted (0: none), each also committing offset (transaction index + 1) of {@code T}-P for
 * group {@code --group G} with sendOffsetsToTransaction (so the offsets are the count of
 * transactions started).
 *
 * <p>With {@code --fence true}, after the last transaction's records are sent a second producer
 * with the same transactional.id calls initTransactions; the first one's commit must then fail
 * with ProducerFencedException.
 *
 * <p>With {@code --check-stable true}, before the last transaction commits (its offsets sent), a
 * read_committed KafkaConsumer of the group asks for the committed offset (OffsetFetch with
 * require_stable) with a 3 s timeout, and again after the commit: events {@code stable-open}
 * and {@code stable-after} (the offset, or the exception's class).
 *
 * <p>With {@code --stall true}, the last transaction is left open once its records and offsets
 * are sent (event {@code stalled}) until a line arrives on standard input; then its commit is
 * tried: event {@code stall-commit} (ok, or the exception's class). With a small
 * transaction.timeout.ms the server has aborted it by then.
 *
 * <p>Events: {@code txn} (index, committed, first and last offset), {@code fenced} (the
 * exception's class), {@code done}; exit status 0 when everything went as planned.
 */
public final class Transact {
  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    String topic = cli.require("topic");
    String txnId = cli.require("transactional-id");
    int txns = cli.getInt("txns", 3);
    int count = cli.getInt("count", 10);
    int abortEvery = cli.getInt("abort-every", 0);
    int partition = cli.getInt("partition", 0);
    String group = cli.get("group", null);
    boolean fence = Boolean.parseBoolean(cli.get("fence", "false"));
    boolean checkStable = Boolean.parseBoolean(cli.get("check-stable", "false"));
    boolean stall = Boolean.parseBoolean(cli.get("stall", "false"));
    Properties p = cli.clientProps();
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    p.put("transactional.id", txnId);
    boolean ok = true;
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
      producer.initTransactions();
      for (int t = 0; t < txns; t++) {
        producer.beginTransaction();
        long first = -1;
        long last = -1;
        for (int i = 0; i < count; i++) {
          RecordMetadata m =
              producer.send(new ProducerRecord<>(topic, partition, "k" + i, "t" + t + "-" + i)).get();
          if (first < 0) {
            first = m.offset();
          }
          last = m.offset();
        }
        if (group != null) {
          producer.sendOffsetsToTransaction(
              Map.of(new TopicPartition(topic, partition), new OffsetAndMetadata(t + 1)),
              new ConsumerGroupMetadata(group));
        }
        boolean abort = abortEvery > 0 && t % abortEvery == abortEvery - 1;
        TopicPartition tp = new TopicPartition(topic, partition);
        if (stall && t == txns - 1) {
          Cli.emit(Cli.event("stalled"));
          new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
          ObjectNode n = Cli.event("stall-commit");
          try {
            producer.commitTransaction();
            n.put("ok", true);
          } catch (Exception e) {
            Cli.putError(n, e);
          }
          Cli.emit(n);
          break;
        }
        if (checkStable && t == txns - 1) {
          Cli.emit(committed(p, group, tp, "stable-open"));
        }
        if (fence && t == txns - 1) {
          Properties q = (Properties) p.clone();
          try (KafkaProducer<String, String> other = new KafkaProducer<>(q)) {
            other.initTransactions();
          }
          try {
            producer.commitTransaction();
            ok = false;
          } catch (ProducerFencedException e) {
            Cli.emit(Cli.event("fenced").put("error", e.getClass().getSimpleName()));
          }
          break;
        }
        if (abort) {
          producer.abortTransaction();
        } else {
          producer.commitTransaction();
        }
        ObjectNode n = Cli.event("txn");
        n.put("index", t);
        n.put("committed", !abort);
        n.put("first", first);
        n.put("last", last);
        Cli.emit(n);
        if (checkStable && t == txns - 1) {
          Cli.emit(committed(p, group, tp, "stable-after"));
        }
      }
    } catch (Exception e) {
      ObjectNode n = Cli.event("error");
      Cli.putError(n, e);
      Cli.emit(n);
      ok = false;
    }
    Cli.emit(Cli.event("done").put("ok", ok));
    System.exit(ok ? 0 : 1);
  }

  /** The group's committed offset of tp as a read_committed consumer sees it (require_stable). */
  private static ObjectNode committed(
      Properties common, String group, TopicPartition tp, String event) {
    Properties c = new Properties();
    c.put("bootstrap.servers", common.getProperty("bootstrap.servers"));
    for (String k : common.stringPropertyNames()) {
      if (k.startsWith("security.") || k.startsWith("sasl.") || k.startsWith("ssl.")) {
        c.put(k, common.getProperty(k));
      }
    }
    c.put("group.id", group);
    c.put("isolation.level", "read_committed");
    c.put("enable.auto.commit", "false");
    c.put("key.deserializer", StringDeserializer.class.getName());
    c.put("value.deserializer", StringDeserializer.class.getName());
    ObjectNode n = Cli.event(event);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
      OffsetAndMetadata o = consumer.committed(Set.of(tp), Duration.ofSeconds(3)).get(tp);
      n.put("offset", o == null ? -1 : o.offset());
    } catch (Exception e) {
      Cli.putError(n, e);
    }
    return n;
  }
}
