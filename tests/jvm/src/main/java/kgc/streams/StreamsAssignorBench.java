package kgc.streams;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.coordinator.group.api.streams.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.streams.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.streams.assignor.TopologyDescriber;
import org.apache.kafka.coordinator.group.streams.assignor.AssignmentConfigsImpl;
import org.apache.kafka.coordinator.group.streams.assignor.GroupSpecImpl;
import org.apache.kafka.coordinator.group.streams.assignor.MemberMetadataAndStateImpl;
import org.apache.kafka.coordinator.group.streams.assignor.StickyTaskAssignor;

/**
 * Kafka 4.4's streams task assignor ({@code StickyTaskAssignor} of the group-coordinator jar)
 * timed on the cases of {@code bench/bench_streams_assignor.py}, for comparison with kgc's port.
 *
 * <p>Usage: {@code StreamsAssignorBench <runs> <members> <processes> <subtopologies> <tasks>
 * <standbys>}. Member i is on process i mod processes; subtopology i has {@code tasks} tasks and
 * is stateful when i is odd. Cases: {@code full} (no previous assignment), {@code join} (every
 * member holds its share of the full answer, one member of a new process joins), {@code standby}
 * (as full, with the standby replicas). Each case first runs {@code runs} times untimed (the JIT
 * warms up, as it has in a running broker), then {@code runs} times timed with the input built
 * outside the timing and a GC before each run. One line per case: {@code <case> <median ms>
 * <min ms> <max ms>}, then {@code moved <n> newcomer <n>} for the join.
 */
public final class StreamsAssignorBench {
  private StreamsAssignorBench() {}

  public static void main(String[] args) {
    int runs = Integer.parseInt(args[0]);
    int members = Integer.parseInt(args[1]);
    int processes = Integer.parseInt(args[2]);
    int subtopologies = Integer.parseInt(args[3]);
    int tasks = Integer.parseInt(args[4]);
    int standbys = Integer.parseInt(args[5]);
    List<String> subs = new ArrayList<>();
    for (int i = 0; i < subtopologies; i++) {
      subs.add(Integer.toString(i));
    }
    TopologyDescriber topology =
        new TopologyDescriber() {
          @Override
          public List<String> subtopologies() {
            return subs;
          }

          @Override
          public int maxNumInputPartitions(String subtopologyId) {
            return tasks;
          }

          @Override
          public boolean isStateful(String subtopologyId) {
            return Integer.parseInt(subtopologyId) % 2 == 1;
          }
        };
    Map<String, MemberMetadataAndStateImpl> fresh = group(members, processes, null);
    GroupAssignment balanced = assign(fresh, topology, 0);
    Map<String, MemberMetadataAndStateImpl> joined = group(members, processes, balanced);
    joined.put("newcomer", member("process-new", Map.of()));

    report("full", runs, () -> assign(fresh, topology, 0));
    report("join", runs, () -> assign(joined, topology, 0));
    report("standby", runs, () -> assign(fresh, topology, standbys));

    GroupAssignment got = assign(joined, topology, 0);
    int moved = 0;
    for (Map.Entry<String, MemberMetadataAndStateImpl> e : joined.entrySet()) {
      Map<String, Set<Integer>> now = got.members().get(e.getKey()).activeTasks();
      for (Map.Entry<String, Set<Integer>> t : e.getValue().activeTasks().entrySet()) {
        for (Integer p : t.getValue()) {
          if (!now.getOrDefault(t.getKey(), Set.of()).contains(p)) {
            moved++;
          }
        }
      }
    }
    int newcomer = 0;
    for (Set<Integer> ps : got.members().get("newcomer").activeTasks().values()) {
      newcomer += ps.size();
    }
    System.out.println("moved " + moved + " newcomer " + newcomer);
  }

  private static GroupAssignment assign(
      Map<String, MemberMetadataAndStateImpl> group, TopologyDescriber topology, int standbys) {
    GroupSpecImpl spec =
        new GroupSpecImpl(group, new AssignmentConfigsImpl(standbys, Collections.emptyList()));
    return new StickyTaskAssignor().assign(spec, topology);
  }

  private static Map<String, MemberMetadataAndStateImpl> group(
      int members, int processes, GroupAssignment previous) {
    Map<String, MemberMetadataAndStateImpl> out = new HashMap<>();
    for (int i = 0; i < members; i++) {
      String id = "member-" + i;
      Map<String, Set<Integer>> active = Map.of();
      if (previous != null) {
        MemberAssignment a = previous.members().get(id);
        active = a == null ? Map.of() : a.activeTasks();
      }
      out.put(id, member("process-" + (i % processes), active));
    }
    return out;
  }

  private static MemberMetadataAndStateImpl member(
      String process, Map<String, Set<Integer>> active) {
    return new MemberMetadataAndStateImpl(
        Optional.empty(),
        Optional.empty(),
        process,
        Map.of(),
        active,
        Map.of(),
        Map.of(),
        Map.of(),
        Map.of());
  }

  private static void report(String name, int runs, Runnable fn) {
    for (int i = 0; i < runs; i++) {
      fn.run();
    }
    List<Double> times = new ArrayList<>();
    for (int i = 0; i < runs; i++) {
      System.gc();
      long t0 = System.nanoTime();
      fn.run();
      times.add((System.nanoTime() - t0) / 1e6);
    }
    Collections.sort(times);
    double median =
        runs % 2 == 1
            ? times.get(runs / 2)
            : (times.get(runs / 2 - 1) + times.get(runs / 2)) / 2;
    System.out.printf(
        "%s %.1f %.1f %.1f%n", name, median, times.get(0), times.get(runs - 1));
  }
}
