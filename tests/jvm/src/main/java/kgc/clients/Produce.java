package kgc.clients;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * KafkaProducer runs, one per compression type, each printing every acknowledgement.
 *
 * <p>Options (besides {@link Cli}'s): {@code --topic T1,T2}; {@code --count N} records per topic
 * and run;
 * {@code --compression none,gzip,...} (one producer per listed type, in order; default none);
 * {@code --idempotent true|false} (enable.idempotence, default true); {@code --acks all};
 * {@code --keys a,b,c} (record i gets key i modulo the list; no keys without it); {@code
 * --value-prefix P} (record i of a run has value P + type + "-" + i); {@code --partition P}
 * (all records to one partition; else the partitioner decides).
 *
 * <p>Events: {@code ack} (codec, topic, partition, offset, key, value), {@code nack} (the same
 * with the error), then {@code done} with the counts; exit status 0 when every record was
 * acknowledged.
 */
public final class Produce {
  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    String[] topics = cli.require("topic").split(",");
    int count = cli.getInt("count", 10);
    String[] codecs = cli.get("compression", "none").split(",");
    String keysOpt = cli.get("keys", null);
    String[] keys = keysOpt == null ? null : keysOpt.split(",");
    String prefix = cli.get("value-prefix", "v-");
    String partitionOpt = cli.get("partition", null);
    Integer partition = partitionOpt == null ? null : Integer.valueOf(partitionOpt);
    AtomicLong acked = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    for (String codec : codecs) {
      Properties p = cli.clientProps();
      p.put("key.serializer", StringSerializer.class.getName());
      p.put("value.serializer", StringSerializer.class.getName());
      p.put("compression.type", codec);
      p.put("enable.idempotence", cli.get("idempotent", "true"));
      p.put("acks", cli.get("acks", "all"));
      p.putIfAbsent("linger.ms", "5");
      try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
        for (String topic : topics) {
          for (int i = 0; i < count; i++) {
            String key = keys == null ? null : keys[i % keys.length];
            String value = prefix + codec + "-" + i;
            producer.send(
                new ProducerRecord<>(topic, partition, key, value),
                (meta, err) -> {
                  ObjectNode n = Cli.event(err == null ? "ack" : "nack");
                  n.put("codec", codec);
                  n.put("topic", topic);
                  n.put("key", key);
                  n.put("value", value);
                  if (err == null) {
                    n.put("partition", meta.partition());
                    n.put("offset", meta.offset());
                    acked.incrementAndGet();
                  } else {
                    Cli.putError(n, err);
                    failed.incrementAndGet();
                  }
                  Cli.emit(n);
                });
          }
        }
        producer.flush();
      }
    }
    Cli.emit(Cli.event("done").put("acked", acked.get()).put("failed", failed.get()));
    System.exit(failed.get() == 0 ? 0 : 1);
  }
}
