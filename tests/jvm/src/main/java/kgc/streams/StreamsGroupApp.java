package kgc.streams;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.StreamsMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Word count instances with {@code group.protocol=streams} (KIP-1071), several in one JVM, for
 * tests/streams.
 *
 * <p>Usage: {@code StreamsGroupApp <bootstrap> <application.id> <input> <output> <state.dir>}.
 * The topology is the word count of {@link WordCount} (repartition topic
 * {@code <app>-words-repartition}, changelog {@code <app>-counts-changelog}); the group
 * coordinator, not the client, creates both internal topics and assigns the tasks.
 *
 * <p>Commands on stdin: {@code start <n>} starts instance n (its own state directory and
 * process id), {@code stop <n>} closes it. Every 100 ms each instance's changes are printed:
 * {@code state <n> <STATE>} and {@code tasks <n> <active ids>;<standby ids>} (comma-separated,
 * sorted), {@code hosts <n> <host:port>=<topic:partition,...>|...} (what
 * {@code metadataForAllStreamsClients} tells instance n of every instance's endpoint, its
 * {@code application.server} localhost:(9100 + n)); an uncaught error prints {@code error <n> <exception>}.
 * {@code ready} is printed once, before the first command is read.
 */
public final class StreamsGroupApp {
  private StreamsGroupApp() {}

  private static final Map<Integer, KafkaStreams> RUNNING = new HashMap<>();

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: StreamsGroupApp <bootstrap> <app> <input> <output> <state.dir>");
      System.exit(2);
    }
    Thread reporter = new Thread(StreamsGroupApp::report, "reporter");
    reporter.setDaemon(true);
    reporter.start();
    say("ready");
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] cmd = line.trim().split(" ");
      int n = Integer.parseInt(cmd[1]);
      if (cmd[0].equals("start")) {
        start(n, args);
      } else if (cmd[0].equals("stop")) {
        KafkaStreams s;
        synchronized (RUNNING) {
          s = RUNNING.remove(n);
        }
        if (s != null) {
          s.close(CloseOptions.timeout(Duration.ofSeconds(20)));
          say("closed " + n);
        }
      }
    }
    synchronized (RUNNING) {
      for (KafkaStreams s : RUNNING.values()) {
        s.close(Duration.ofSeconds(5));
      }
    }
  }

  private static void start(int n, String[] args) {
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[4] + "/" + n);
    props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
    // Interactive queries: an endpoint per instance, never listened on (only advertised).
    props.put(StreamsConfig.APPLICATION_SERVER_CONFIG, "localhost:" + (9100 + n));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
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
    streams.setStateListener((now, before) -> say("state " + n + " " + now));
    streams.setUncaughtExceptionHandler(
        e -> {
          say("error " + n + " " + e);
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
              .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    synchronized (RUNNING) {
      RUNNING.put(n, streams);
    }
    streams.start();
  }

  private static void report() {
    Map<Integer, String> last = new HashMap<>();
    while (true) {
      Map<Integer, KafkaStreams> now;
      synchronized (RUNNING) {
        now = new HashMap<>(RUNNING);
      }
      for (Map.Entry<Integer, KafkaStreams> e : now.entrySet()) {
        String tasks = tasks(e.getValue());
        if (tasks != null && !tasks.equals(last.get(e.getKey()))) {
          say("tasks " + e.getKey() + " " + tasks);
          last.put(e.getKey(), tasks);
        }
        String hosts = hosts(e.getValue());
        if (hosts != null && !hosts.equals(last.get(-e.getKey()))) {
          say("hosts " + e.getKey() + " " + hosts);
          last.put(-e.getKey(), hosts);
        }
      }
      try {
        Thread.sleep(100);
      } catch (InterruptedException stop) {
        return;
      }
    }
  }

  private static String tasks(KafkaStreams streams) {
    List<String> active = new ArrayList<>();
    List<String> standby = new ArrayList<>();
    try {
      for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
        for (TaskMetadata task : thread.activeTasks()) {
          active.add(task.taskId().toString());
        }
        for (TaskMetadata task : thread.standbyTasks()) {
          standby.add(task.taskId().toString());
        }
      }
    } catch (RuntimeException notRunning) {
      return null;
    }
    Collections.sort(active);
    Collections.sort(standby);
    return String.join(",", active) + ";" + String.join(",", standby);
  }

  /** Every instance's endpoint and the partitions it runs, as this instance sees them. */
  private static String hosts(KafkaStreams streams) {
    TreeSet<String> out = new TreeSet<>();
    try {
      for (StreamsMetadata md : streams.metadataForAllStreamsClients()) {
        TreeSet<String> tps = new TreeSet<>();
        md.topicPartitions().forEach(tp -> tps.add(tp.topic() + ":" + tp.partition()));
        out.add(md.host() + ":" + md.port() + "=" + String.join(",", tps));
      }
    } catch (RuntimeException notRunning) {
      return null;
    }
    return String.join("|", out);
  }

  private static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
