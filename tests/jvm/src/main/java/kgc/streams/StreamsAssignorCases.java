package kgc.streams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.coordinator.group.api.streams.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.streams.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.streams.assignor.TopologyDescriber;
import org.apache.kafka.coordinator.group.streams.assignor.AssignmentConfigsImpl;
import org.apache.kafka.coordinator.group.streams.assignor.GroupSpecImpl;
import org.apache.kafka.coordinator.group.streams.assignor.MemberMetadataAndStateImpl;
import org.apache.kafka.coordinator.group.streams.assignor.StickyTaskAssignor;

/**
 * Kafka 4.4's streams task assignor ({@code StickyTaskAssignor} of the group-coordinator jar) on
 * cases read from stdin, for a differential against kgc's port.
 *
 * <p>One case per input line: {@code {"standbys": n, "subtopologies": [{"id", "tasks",
 * "stateful"}], "members": [{"id", "process", "active": {sub: [partitions]}, "standby": {...},
 * "offsets": {sub: {partition: sum}}}]}}. The members go into a {@code HashMap} in the listed
 * order, as Kafka's {@code TargetAssignmentBuilder} puts them. One output line per case: {@code
 * {member: {"active": {sub: [sorted partitions]}, "standby": {...}}}} with keys sorted, or
 * {@code {"error": message}} when the assignor throws.
 */
public final class StreamsAssignorCases {
  private StreamsAssignorCases() {}

  public static void main(String[] args) throws Exception {
    ObjectMapper json = new ObjectMapper();
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      JsonNode c = json.readTree(line);
      ObjectNode result = json.createObjectNode();
      try {
        GroupAssignment got = assign(c);
        for (Map.Entry<String, MemberAssignment> e : new TreeMap<>(got.members()).entrySet()) {
          ObjectNode m = result.putObject(e.getKey());
          m.set("active", json.valueToTree(sorted(e.getValue().activeTasks())));
          m.set("standby", json.valueToTree(sorted(e.getValue().standbyTasks())));
        }
      } catch (RuntimeException ex) {
        result.removeAll();
        result.put("error", ex.getMessage());
      }
      out.println(json.writeValueAsString(result));
    }
    out.flush();
  }

  private static GroupAssignment assign(JsonNode c) {
    List<String> subs = new ArrayList<>();
    Map<String, Integer> tasks = new HashMap<>();
    Set<String> stateful = new HashSet<>();
    for (JsonNode s : c.get("subtopologies")) {
      String id = s.get("id").asText();
      subs.add(id);
      tasks.put(id, s.get("tasks").asInt());
      if (s.get("stateful").asBoolean()) {
        stateful.add(id);
      }
    }
    TopologyDescriber topology =
        new TopologyDescriber() {
          @Override
          public List<String> subtopologies() {
            return subs;
          }

          @Override
          public int maxNumInputPartitions(String subtopologyId) {
            return tasks.get(subtopologyId);
          }

          @Override
          public boolean isStateful(String subtopologyId) {
            return stateful.contains(subtopologyId);
          }
        };
    Map<String, MemberMetadataAndStateImpl> members = new HashMap<>();
    for (JsonNode m : c.get("members")) {
      Map<String, Map<Integer, Long>> offsets = new HashMap<>();
      JsonNode o = m.get("offsets");
      if (o != null) {
        for (Iterator<Map.Entry<String, JsonNode>> it = o.fields(); it.hasNext(); ) {
          Map.Entry<String, JsonNode> e = it.next();
          Map<Integer, Long> parts = new HashMap<>();
          for (Iterator<Map.Entry<String, JsonNode>> p = e.getValue().fields(); p.hasNext(); ) {
            Map.Entry<String, JsonNode> pe = p.next();
            parts.put(Integer.parseInt(pe.getKey()), pe.getValue().asLong());
          }
          offsets.put(e.getKey(), parts);
        }
      }
      members.put(
          m.get("id").asText(),
          new MemberMetadataAndStateImpl(
              Optional.empty(),
              Optional.empty(),
              m.get("process").asText(),
              Map.of(),
              tasksOf(m.get("active")),
              tasksOf(m.get("standby")),
              Map.of(),
              offsets,
              Map.of()));
    }
    GroupSpecImpl spec =
        new GroupSpecImpl(
            members, new AssignmentConfigsImpl(c.get("standbys").asInt(), List.of()));
    return new StickyTaskAssignor().assign(spec, topology);
  }

  private static Map<String, Set<Integer>> tasksOf(JsonNode node) {
    Map<String, Set<Integer>> out = new HashMap<>();
    if (node == null) {
      return out;
    }
    for (Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      Set<Integer> parts = new HashSet<>();
      for (JsonNode p : e.getValue()) {
        parts.add(p.asInt());
      }
      out.put(e.getKey(), parts);
    }
    return out;
  }

  private static Map<String, Set<Integer>> sorted(Map<String, Set<Integer>> tasks) {
    Map<String, Set<Integer>> out = new TreeMap<>();
    for (Map.Entry<String, Set<Integer>> e : tasks.entrySet()) {
      if (!e.getValue().isEmpty()) {
        out.put(e.getKey(), new TreeSet<>(e.getValue()));
      }
    }
    return out;
  }
}
