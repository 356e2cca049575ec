package kgc.streams;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * One Kafka Streams instance of a word count, for tests/streams.
 *
 * <p>Usage: {@code WordCount <bootstrap> <application.id> <input> <output> <state.dir>
 * [<processing.guarantee> [<group.protocol>]]}. The
 * topology splits each input value on spaces, re-keys every word by itself ({@code groupBy}:
 * the repartition topic {@code <app>-words-repartition}) and counts it in a persistent store
 * ({@code counts}, logged to the compacted {@code <app>-counts-changelog}); every new count goes
 * to the output topic as word -> long. Streams creates both internal topics through
 * CreateTopics (with {@code group.protocol=streams}, the group coordinator creates them). The group
 * protocol is the classic one and the guarantee at-least-once unless given; the record cache is
 * off and the commit interval short, so every update reaches the output promptly; the
 * repartition records committed past are purged (DeleteRecords) every half second. With
 * {@code exactly_once_v2} every commit is a transaction of the thread's producer.
 *
 * <p>It prints one line per change on stdout for the test to wait on: {@code state <STATE>}
 * when the instance changes state and {@code tasks <active task ids, comma-separated>} when its
 * active tasks change. SIGTERM closes it cleanly; the test kills one instance with SIGKILL.
 */
public final class WordCount {
  private WordCount() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 5 || args.length > 7) {
      System.err.println(
          "usage: WordCount <bootstrap> <application.id> <input> <output> <state.dir>"
              + " [<processing.guarantee> [<group.protocol>]]");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    String protocol = args.length > 6 ? args[6] : "classic";
    props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
    props.put(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        args.length > 5 ? args[5] : StreamsConfig.AT_LEAST_ONCE);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    // Streams deletes the repartition records it has committed past (DeleteRecords): soon, here.
    props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 500);
    props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    if (protocol.equals("classic")) {
      // The survivor takes the killed instance's tasks once its session expires: keep that
      // short (a streams group's session timeout is the coordinator's, not the client's).
      props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
      props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
    }
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
        .flatMapValues(value -> Arrays.asList(value.toLowerCase(Locale.ROOT).split(" +")))
        .filter((key, word) -> !word.isEmpty())
        .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
        .count(Materialized.as("counts"))
        .toStream()
        .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch closed = new CountDownLatch(1);
    CountDownLatch said = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          say("state " + now);
          if (now.hasCompletedShutdown()) {
            said.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        e -> {
          say("error " + e);
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
              .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  // close() returns once the state is NOT_RUNNING, but Streams calls the
                  // listener after that, on its close thread: the JVM halts when this hook
                  // ends, so the hook waits for the last state line to be printed.
                  if (streams.close(Duration.ofSeconds(20))) {
                    try {
                      said.await(10, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                      Thread.currentThread().interrupt();
                    }
                  }
                  closed.countDown();
                }));
    streams.start();
    String last = null;
    while (closed.getCount() > 0) {
      String tasks = activeTasks(streams);
      if (tasks != null && !tasks.equals(last)) {
        say("tasks " + tasks);
        last = tasks;
      }
      Thread.sleep(50);
    }
  }

  private static String activeTasks(KafkaStreams streams) {
    List<String> ids = new ArrayList<>();
    try {
      for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
        for (TaskMetadata task : thread.activeTasks()) {
          ids.add(task.taskId().toString());
        }
      }
    } catch (RuntimeException notRunning) {
      return null;
    }
    Collections.sort(ids);
    return String.join(",", ids);
  }

  private static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
