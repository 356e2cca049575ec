package kgc.secure;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Consumer groups of the Java client consuming a topic while a producer writes to it, driven
 * from standard input, for a coordinator failover test.
 *
 * <p>Arguments: {@code BOOTSTRAP TOPIC PARTITIONS MEMBERS GROUP:PROTOCOL...}. A producer
 * (acks=all, idempotent) writes record i to partition i % PARTITIONS at a steady pace and
 * records every acknowledged (partition, offset). Each group has MEMBERS consumers (each a
 * thread with its own KafkaConsumer, group.protocol PROTOCOL) that poll, note every record,
 * and commit their positions synchronously after each poll; every acknowledged commit raises
 * the group's {@code acked} offsets.
 *
 * <p>Commands, one per line on standard input: {@code pause} (no commit starts after it; the
 * reply {@code paused} comes once the commits in flight have returned, with each group's
 * acknowledged offsets), {@code resume}, {@code finish} (stop producing, let every group
 * consume every acknowledged record, commit, close, then report each group's committed
 * offsets as an AdminClient lists them, and the acknowledged records it never consumed).
 * Output: one JSON object per line; {@code progress} lines every 200 ms. A commit that fails is
 * not retried (the next poll commits again); its error is kept, with the phase it happened in
 * (before the pause, paused, after the resume), for the final report.
 */
public final class ClusterGroup {

  static final class Group {
    final String id;
    final String protocol;
    final Map<Integer, Long> acked = new ConcurrentHashMap<>();
    final Map<Integer, Set<Long>> consumed = new ConcurrentHashMap<>();
    final AtomicLong records = new AtomicLong();
    final AtomicLong commits = new AtomicLong();
    final AtomicLong commitsAfterResume = new AtomicLong();
    final List<String> errors = java.util.Collections.synchronizedList(new ArrayList<>());

    Group(String id, String protocol) {
      this.id = id;
      this.protocol = protocol;
    }

    void noteConsumed(int p, long o) {
      consumed.computeIfAbsent(p, k -> ConcurrentHashMap.newKeySet()).add(o);
      records.incrementAndGet();
    }

    void noteAcked(Map<TopicPartition, OffsetAndMetadata> offsets) {
      offsets.forEach((tp, om) -> acked.merge(tp.partition(), om.offset(), Math::max));
    }
  }

  private static final ReentrantReadWriteLock COMMITS = new ReentrantReadWriteLock();
  private static volatile boolean paused;
  private static volatile boolean resumed;
  private static final AtomicBoolean producing = new AtomicBoolean(true);
  private static final AtomicBoolean consuming = new AtomicBoolean(true);
  private static final Map<Integer, Set<Long>> produced = new ConcurrentHashMap<>();
  private static final AtomicLong producedCount = new AtomicLong();
  private static final List<String> produceErrors =
      java.util.Collections.synchronizedList(new ArrayList<>());

  private ClusterGroup() {}

  static synchronized void emit(Map<String, Object> o) {
    try {
      System.out.println(Json.write(o));
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    int partitions = Integer.parseInt(args[2]);
    int members = Integer.parseInt(args[3]);
    List<Group> groups = new ArrayList<>();
    for (int i = 4; i < args.length; i++) {
      String[] gp = args[i].split(":");
      groups.add(new Group(gp[0], gp[1]));
    }

    Thread producer = new Thread(() -> produce(bootstrap, topic, partitions), "producer");
    producer.start();
    List<Thread> consumers = new ArrayList<>();
    for (Group g : groups) {
      for (int m = 0; m < members; m++) {
        Thread t = new Thread(() -> consume(bootstrap, topic, g), g.id + "-" + m);
        t.start();
        consumers.add(t);
      }
    }
    Thread progress =
        new Thread(
            () -> {
              while (consuming.get()) {
                Map<String, Object> o = Json.object();
                o.put("event", "progress");
                o.put("produced", producedCount.get());
                Map<String, Object> gs = Json.child(o, "groups");
                for (Group g : groups) {
                  Map<String, Object> go = Json.child(gs, g.id);
                  go.put("records", g.records.get());
                  go.put("commits", g.commits.get());
                  go.put("commits_after_resume", g.commitsAfterResume.get());
                }
                emit(o);
                try {
                  Thread.sleep(200);
                } catch (InterruptedException e) {
                  return;
                }
              }
            },
            "progress");
    progress.setDaemon(true);
    progress.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      switch (line.trim()) {
        case "pause" -> {
          COMMITS.writeLock().lock(); // waits for the commits in flight
          try {
            paused = true;
          } finally {
            COMMITS.writeLock().unlock();
          }
          Map<String, Object> o = Json.object();
          o.put("event", "paused");
          Map<String, Object> gs = Json.child(o, "acked");
          for (Group g : groups) {
            gs.put(g.id, intMap(g.acked));
          }
          emit(o);
        }
        case "resume" -> {
          resumed = true;
          paused = false;
          Map<String, Object> o = Json.object();
          o.put("event", "resumed");
          emit(o);
        }
        case "finish" -> {
          finish(bootstrap, topic, partitions, groups, producer, consumers);
          return;
        }
        default -> throw new IllegalArgumentException("unknown command " + line);
      }
    }
  }

  static Map<String, Object> intMap(Map<Integer, Long> m) {
    Map<String, Object> o = Json.object();
    new TreeMap<>(m).forEach((p, v) -> o.put(String.valueOf(p), v));
    return o;
  }

  /** When an error happened: before the pause, while paused, or after the resume. */
  static String phase() {
    return resumed ? "(after resume) " : paused ? "(paused) " : "(before pause) ";
  }

  static void produce(String bootstrap, String topic, int partitions) {
    Properties pp = new Properties();
    pp.put("bootstrap.servers", bootstrap);
    pp.put("acks", "all");
    pp.put("enable.idempotence", "true");
    pp.put("linger.ms", "5");
    pp.put("reconnect.backoff.max.ms", "500");
    pp.put("retry.backoff.max.ms", "500");
    pp.put("metadata.max.age.ms", "2000");
    pp.put("key.serializer", StringSerializer.class.getName());
    pp.put("value.serializer", StringSerializer.class.getName());
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      long i = 0;
      while (producing.get()) {
        int p = (int) (i % partitions);
        producer.send(
            new ProducerRecord<>(topic, p, "k" + i, "v" + i),
            (md, e) -> {
              if (e != null) {
                produceErrors.add(e.getClass().getName() + ": " + e.getMessage());
              } else {
                produced.computeIfAbsent(md.partition(), k -> ConcurrentHashMap.newKeySet())
                    .add(md.offset());
                producedCount.incrementAndGet();
              }
            });
        i++;
        // The pace of the workload (about 250 records a second), not a synchronization.
        Thread.sleep(4);
      }
      producer.flush();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  static void consume(String bootstrap, String topic, Group g) {
    Properties cp = new Properties();
    cp.put("bootstrap.servers", bootstrap);
    cp.put("group.id", g.id);
    cp.put("group.protocol", g.protocol);
    cp.put("auto.offset.reset", "earliest");
    cp.put("enable.auto.commit", "false");
    cp.put("max.poll.records", "50");
    cp.put("reconnect.backoff.max.ms", "500");
    cp.put("retry.backoff.max.ms", "500");
    cp.put("metadata.max.age.ms", "2000");
    if (g.protocol.equals("classic")) {
      cp.put("heartbeat.interval.ms", "500");
      cp.put("session.timeout.ms", "20000");
    }
    cp.put("key.deserializer", StringDeserializer.class.getName());
    cp.put("value.deserializer", StringDeserializer.class.getName());
    Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      consumer.subscribe(
          List.of(topic),
          new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
              parts.forEach(positions::remove);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {}

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
              parts.forEach(positions::remove);
            }
          });
      while (consuming.get()) {
        for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(100))) {
          g.noteConsumed(rec.partition(), rec.offset());
          positions.put(
              new TopicPartition(rec.topic(), rec.partition()),
              new OffsetAndMetadata(rec.offset() + 1));
        }
        if (positions.isEmpty()) {
          continue;
        }
        COMMITS.readLock().lock();
        try {
          if (paused) {
            continue;
          }
          Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>(positions);
          boolean afterResume = resumed;
          try {
            consumer.commitSync(offsets, Duration.ofSeconds(30));
            g.noteAcked(offsets);
            g.commits.incrementAndGet();
            if (afterResume) {
              g.commitsAfterResume.incrementAndGet();
            }
          } catch (WakeupException e) {
            throw e;
          } catch (Exception e) {
            g.errors.add(phase() + e.getClass().getName() + ": " + e.getMessage());
          }
        } finally {
          COMMITS.readLock().unlock();
        }
      }
    } catch (Exception e) {
      g.errors.add("member died: " + phase() + e.getClass().getName() + ": " + e.getMessage());
    }
  }

  static void finish(
      String bootstrap,
      String topic,
      int partitions,
      List<Group> groups,
      Thread producer,
      List<Thread> consumers)
      throws Exception {
    producing.set(false);
    producer.join(60_000);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (System.nanoTime() < deadline && !groups.stream().allMatch(ClusterGroup::caughtUp)) {
      Thread.sleep(50);
    }
    // One more round of commits after the last record is consumed, then stop.
    long[] before = groups.stream().mapToLong(g -> g.commits.get()).toArray();
    while (System.nanoTime() < deadline) {
      boolean all = true;
      for (int i = 0; i < groups.size(); i++) {
        all &= groups.get(i).commits.get() > before[i];
      }
      if (all) {
        break;
      }
      Thread.sleep(50);
    }
    consuming.set(false);
    for (Thread t : consumers) {
      t.join(60_000);
    }
    Map<String, Object> o = Json.object();
    o.put("event", "finished");
    o.put("produced", producedCount.get());
    Map<Integer, Long> ends = new TreeMap<>();
    produced.forEach((p, offs) -> ends.put(p, offs.stream().mapToLong(x -> x).max().orElse(-1) + 1));
    o.put("log_end", intMap(ends));
    List<Object> pe = Json.array(o, "produce_errors");
    synchronized (produceErrors) {
      produceErrors.stream().limit(20).forEach(pe::add);
    }
    Properties ap = new Properties();
    ap.put("bootstrap.servers", bootstrap);
    Map<String, Object> gs = Json.child(o, "groups");
    try (Admin admin = Admin.create(ap)) {
      for (Group g : groups) {
        Map<String, Object> go = Json.child(gs, g.id);
        Map<Integer, Long> committed = new HashMap<>();
        admin
            .listConsumerGroupOffsets(g.id)
            .partitionsToOffsetAndMetadata()
            .get(30, TimeUnit.SECONDS)
            .forEach((tp, om) -> committed.put(tp.partition(), om.offset()));
        go.put("committed", intMap(committed));
        go.put("acked", intMap(g.acked));
        go.put("records", g.records.get());
        go.put("commits", g.commits.get());
        go.put("commits_after_resume", g.commitsAfterResume.get());
        List<Object> missing = Json.array(go, "missing");
        int n = 0;
        for (var e : new TreeMap<>(produced).entrySet()) {
          Set<Long> seen = g.consumed.getOrDefault(e.getKey(), Set.of());
          for (long off : new TreeSet<>(e.getValue())) {
            if (!seen.contains(off) && n++ < 20) {
              missing.add(e.getKey() + "@" + off);
            }
          }
        }
        go.put("missing_count", n);
        List<Object> errs = Json.array(go, "errors");
        synchronized (g.errors) {
          g.errors.stream().limit(20).forEach(errs::add);
        }
      }
    }
    emit(o);
  }

  static boolean caughtUp(Group g) {
    for (var e : produced.entrySet()) {
      Set<Long> seen = g.consumed.getOrDefault(e.getKey(), Set.of());
      if (!seen.containsAll(e.getValue())) {
        return false;
      }
    }
    return true;
  }
}
