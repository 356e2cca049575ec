package kgc.clients;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * What the test programs share: their command line and their output.
 *
 * <p>Every program takes {@code --bootstrap HOST:PORT}, optionally {@code --config FILE} (a
 * Kafka client.properties file, e.g. security.protocol and SASL/TLS settings, applied to every
 * client the program creates) and {@code --property key=value} (repeatable, applied after the
 * file), then its own {@code --name value} options. Output is one JSON object per line on
 * standard output, written whole and flushed, so a test reads events as they happen; logging
 * goes to standard error.
 */
final class Cli {
  static final ObjectMapper JSON = new ObjectMapper();

  final String bootstrap;
  final Properties common = new Properties();
  private final Map<String, List<String>> options = new HashMap<>();
  final List<String> positional = new ArrayList<>();

  Cli(String[] args) throws IOException {
    String boot = null;
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (!a.startsWith("--")) {
        positional.add(a);
        continue;
      }
      if (i + 1 >= args.length) {
        throw new IllegalArgumentException(a + " needs a value");
      }
      String v = args[++i];
      switch (a) {
        case "--bootstrap" -> boot = v;
        case "--config" -> {
          if (!v.isEmpty()) {
            try (InputStream in = Files.newInputStream(Path.of(v))) {
              common.load(in);
            }
          }
        }
        case "--property" -> {
          int eq = v.indexOf('=');
          if (eq < 0) {
            throw new IllegalArgumentException("--property wants key=value, got " + v);
          }
          common.setProperty(v.substring(0, eq), v.substring(eq + 1));
        }
        default -> options.computeIfAbsent(a.substring(2), k -> new ArrayList<>()).add(v);
      }
    }
    if (boot == null) {
      throw new IllegalArgumentException("--bootstrap is required");
    }
    bootstrap = boot;
  }

  /** The properties of a new client: bootstrap, then the file and --property settings. */
  Properties clientProps() {
    Properties p = new Properties();
    p.setProperty("bootstrap.servers", bootstrap);
    p.putAll(common);
    return p;
  }

  String get(String name, String fallback) {
    List<String> v = options.get(name);
    return v == null ? fallback : v.get(v.size() - 1);
  }

  String require(String name) {
    String v = get(name, null);
    if (v == null) {
      throw new IllegalArgumentException("--" + name + " is required");
    }
    return v;
  }

  List<String> all(String name) {
    return options.getOrDefault(name, List.of());
  }

  int getInt(String name, int fallback) {
    String v = get(name, null);
    return v == null ? fallback : Integer.parseInt(v);
  }

  static ObjectNode event(String name) {
    ObjectNode n = JSON.createObjectNode();
    n.put("event", name);
    return n;
  }

  static synchronized void emit(ObjectNode n) {
    n.put("ms", System.currentTimeMillis());
    try {
      System.out.println(JSON.writeValueAsString(n));
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    System.out.flush();
  }

  /** Starts a daemon thread putting each line of standard input into {@code commands}. */
  static void readCommands(java.util.concurrent.BlockingQueue<String> commands) {
    Thread reader =
        new Thread(
            () -> {
              try (java.io.BufferedReader in =
                  new java.io.BufferedReader(
                      new java.io.InputStreamReader(
                          System.in, java.nio.charset.StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  commands.put(line);
                }
              } catch (Exception e) {
                // standard input closed: no more commands
              }
            },
            "stdin");
    reader.setDaemon(true);
    reader.start();
  }

  /** The exception's cause chain unwrapped to what the client raised (ExecutionException off). */
  static Throwable root(Throwable t) {
    while ((t instanceof java.util.concurrent.ExecutionException
            || t instanceof java.util.concurrent.CompletionException)
        && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  static void putError(ObjectNode n, Throwable t) {
    Throwable r = root(t);
    n.put("error", r.getClass().getName());
    n.put("message", r.getMessage());
  }
}
