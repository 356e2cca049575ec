package kgc.secure;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * JSON output without a library (Jackson is only on Kafka's runtime classpath): maps, lists,
 * strings, numbers and booleans, written as one line.
 */
final class Json {
  private Json() {}

  /** A JSON object under construction, keys in insertion order. */
  static Map<String, Object> object() {
    return new LinkedHashMap<>();
  }

  /** A new list put under {@code key} of {@code parent}. */
  static List<Object> array(Map<String, Object> parent, String key) {
    List<Object> list = new ArrayList<>();
    parent.put(key, list);
    return list;
  }

  /** A new object put under {@code key} of {@code parent}. */
  static Map<String, Object> child(Map<String, Object> parent, String key) {
    Map<String, Object> o = object();
    parent.put(key, o);
    return o;
  }

  static String write(Object value) {
    StringBuilder b = new StringBuilder();
    write(b, value);
    return b.toString();
  }

  private static void write(StringBuilder b, Object v) {
    if (v == null) {
      b.append("null");
    } else if (v instanceof Map<?, ?> m) {
      b.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (!first) {
          b.append(',');
        }
        first = false;
        string(b, String.valueOf(e.getKey()));
        b.append(':');
        write(b, e.getValue());
      }
      b.append('}');
    } else if (v instanceof Collection<?> c) {
      b.append('[');
      boolean first = true;
      for (Object o : c) {
        if (!first) {
          b.append(',');
        }
        first = false;
        write(b, o);
      }
      b.append(']');
    } else if (v instanceof Number || v instanceof Boolean) {
      b.append(v);
    } else {
      string(b, v.toString());
    }
  }

  private static void string(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    b.append('"');
  }
}
