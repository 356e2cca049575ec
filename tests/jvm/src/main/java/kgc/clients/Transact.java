package kgc.clients;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
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
}
