package kgc.secure;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client against a secured listener: a few scenarios in one JVM, one JSON line each.
 *
 * <p>Steps follow each other on the command line, each a verb and its arguments:
 *
 * <ul>
 *   <li>{@code roundtrip BOOTSTRAP PROPS TOPIC GROUP COUNT PROTOCOL}: an AdminClient describes
 *       the cluster and creates TOPIC (3 partitions); a producer (acks=all, idempotent) writes
 *       COUNT records, record i to partition i % 3, waiting for every acknowledgement; a
 *       consumer in GROUP (group.protocol PROTOCOL) subscribes, polls until it has all COUNT,
 *       commits synchronously and reads its committed offsets back; the AdminClient then lists
 *       the group's offsets and describes it.
 *   <li>{@code refused BOOTSTRAP PROPS}: an AdminClient (describeCluster), a producer
 *       (partitionsFor) and a consumer (partitionsFor), each expected to fail; the class of
 *       what each threw (the cause, for the AdminClient's future) is reported.
 *   <li>{@code scram-user BOOTSTRAP PROPS USER PASSWORD}: AlterUserScramCredentials upserts a
 *       SCRAM-SHA-512 credential (how a user is made on a running server).
 * </ul>
 *
 * PROPS is a Kafka client.properties file applied to every client of the step. A step that
 * throws reports {@code error} (class) and {@code message} instead of its results; the next
 * step still runs. Every line also gives the step's {@code elapsed_ms}.
 */
public final class SecureClients {
  private static final int PARTITIONS = 3;
  private static final Duration WAIT = Duration.ofSeconds(30);

  private SecureClients() {}

  public static void main(String[] args) throws Exception {
    int i = 0;
    while (i < args.length) {
      String verb = args[i];
      int arity =
          switch (verb) {
            case "roundtrip" -> 6;
            case "refused" -> 2;
            case "scram-user" -> 4;
            default -> throw new IllegalArgumentException("unknown step " + verb);
          };
      String[] a = java.util.Arrays.copyOfRange(args, i + 1, i + 1 + arity);
      i += 1 + arity;
      Map<String, Object> out = Json.object();
      out.put("step", verb);
      long began = System.nanoTime();
      try {
        switch (verb) {
          case "roundtrip" -> roundtrip(out, a);
          case "refused" -> refused(out, a);
          default -> scramUser(out, a);
        }
      } catch (Exception e) {
        Throwable t = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        out.put("error", t.getClass().getName());
        out.put("message", String.valueOf(t.getMessage()));
      }
      out.put("elapsed_ms", (System.nanoTime() - began) / 1_000_000);
      System.out.println(Json.write(out));
      System.out.flush();
    }
  }

  static Properties load(String bootstrap, String file) throws Exception {
    Properties p = new Properties();
    try (InputStream in = Files.newInputStream(Path.of(file))) {
      p.load(in);
    }
    p.put("bootstrap.servers", bootstrap);
    return p;
  }

  static void roundtrip(Map<String, Object> out, String[] a) throws Exception {
    String bootstrap = a[0];
    Properties base = load(bootstrap, a[1]);
    String topic = a[2];
    String group = a[3];
    int count = Integer.parseInt(a[4]);
    String protocol = a[5];
    try (Admin admin = Admin.create(base)) {
      List<Object> nodes = Json.array(out, "nodes");
      for (Node n : admin.describeCluster().nodes().get(WAIT.toSeconds(), TimeUnit.SECONDS)) {
        nodes.add(n.host() + ":" + n.port());
      }
      admin
          .createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1)))
          .all()
          .get(WAIT.toSeconds(), TimeUnit.SECONDS);
    }

    Properties pp = new Properties();
    pp.putAll(base);
    pp.put("acks", "all");
    pp.put("enable.idempotence", "true");
    pp.put("key.serializer", StringSerializer.class.getName());
    pp.put("value.serializer", StringSerializer.class.getName());
    int acked = 0;
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      List<Future<RecordMetadata>> sent = new ArrayList<>();
      for (int r = 0; r < count; r++) {
        sent.add(producer.send(new ProducerRecord<>(topic, r % PARTITIONS, "k" + r, "v" + r)));
      }
      for (Future<RecordMetadata> f : sent) {
        f.get(WAIT.toSeconds(), TimeUnit.SECONDS);
        acked++;
      }
    }
    out.put("acked", acked);

    Properties cp = new Properties();
    cp.putAll(base);
    cp.put("group.id", group);
    cp.put("group.protocol", protocol);
    cp.put("auto.offset.reset", "earliest");
    cp.put("enable.auto.commit", "false");
    cp.put("key.deserializer", StringDeserializer.class.getName());
    cp.put("value.deserializer", StringDeserializer.class.getName());
    List<String> keys = new ArrayList<>();
    List<TopicPartition> tps = new ArrayList<>();
    for (int p = 0; p < PARTITIONS; p++) {
      tps.add(new TopicPartition(topic, p));
    }
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      consumer.subscribe(List.of(topic));
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (keys.size() < count && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(200))) {
          keys.add(rec.key());
        }
      }
      consumer.commitSync(WAIT);
      out.put("committed", offsets(consumer.committed(new java.util.HashSet<>(tps), WAIT)));
    }
    List<Object> consumed = Json.array(out, "consumed");
    keys.forEach(consumed::add);

    try (Admin admin = Admin.create(base)) {
      out.put(
          "admin_offsets",
          offsets(
              admin
                  .listConsumerGroupOffsets(group)
                  .partitionsToOffsetAndMetadata()
                  .get(WAIT.toSeconds(), TimeUnit.SECONDS)));
      ConsumerGroupDescription d =
          admin
              .describeConsumerGroups(List.of(group))
              .describedGroups()
              .get(group)
              .get(WAIT.toSeconds(), TimeUnit.SECONDS);
      out.put("group_state", String.valueOf(d.groupState()));
      out.put("group_type", String.valueOf(d.type()));
    }
  }

  static Map<String, Object> offsets(Map<TopicPartition, OffsetAndMetadata> m) {
    Map<String, Object> o = Json.object();
    Map<Integer, Long> sorted = new TreeMap<>();
    m.forEach((tp, om) -> sorted.put(tp.partition(), om == null ? -1L : om.offset()));
    sorted.forEach((p, off) -> o.put(String.valueOf(p), off));
    return o;
  }

  static void refused(Map<String, Object> out, String[] a) throws Exception {
    Properties base = load(a[0], a[1]);
    base.put("default.api.timeout.ms", "15000");
    base.put("request.timeout.ms", "10000");
    try (Admin admin = Admin.create(base)) {
      Collection<Node> nodes = null;
      try {
        nodes = admin.describeCluster().nodes().get(20, TimeUnit.SECONDS);
      } catch (ExecutionException e) {
        record(out, "admin", e.getCause());
      } catch (Exception e) {
        record(out, "admin", e);
      }
      if (nodes != null) {
        out.put("admin", "accepted");
      }
    }
    Properties pp = new Properties();
    pp.putAll(base);
    pp.put("key.serializer", StringSerializer.class.getName());
    pp.put("value.serializer", StringSerializer.class.getName());
    pp.put("max.block.ms", "15000");
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      producer.partitionsFor("any-topic");
      out.put("producer", "accepted");
    } catch (Exception e) {
      record(out, "producer", e);
    }
    Properties cp = new Properties();
    cp.putAll(base);
    cp.put("key.deserializer", StringDeserializer.class.getName());
    cp.put("value.deserializer", StringDeserializer.class.getName());
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      consumer.partitionsFor("any-topic", Duration.ofSeconds(15));
      out.put("consumer", "accepted");
    } catch (Exception e) {
      record(out, "consumer", e);
    }
  }

  static void record(Map<String, Object> out, String who, Throwable t) {
    Map<String, Object> o = Json.child(out, who);
    o.put("class", t.getClass().getName());
    o.put("message", String.valueOf(t.getMessage()));
  }

  static void scramUser(Map<String, Object> out, String[] a) throws Exception {
    Properties base = load(a[0], a[1]);
    try (Admin admin = Admin.create(base)) {
      admin
          .alterUserScramCredentials(
              List.of(
                  new UserScramCredentialUpsertion(
                      a[2], new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), a[3])))
          .all()
          .get(WAIT.toSeconds(), TimeUnit.SECONDS);
      out.put("user", a[2]);
    }
  }
}
