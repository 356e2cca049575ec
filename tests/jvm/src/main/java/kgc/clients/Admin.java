package kgc.clients;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DeleteAclsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberAssignment;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A sequence of AdminClient calls, each printing its result or the error the client raised.
 *
 * <p>Steps are JSON objects, given as arguments or (without any) one per line on standard
 * input, so a test can interleave them with its own checks. {@code op} names the call; the
 * other fields are its arguments (see each method). Partitions are {@code [topic, partition]}
 * and are keyed {@code "topic:partition"} in results. Each step prints {@code {"event":
 * "result", "step": n, "op": ..., "ok": true, "result": ...}} or, when the call failed as a
 * whole, {@code "ok": false} with {@code error} (the exception's class) and {@code message};
 * calls with one future per item report each item's error in the item.
 *
 * <p>Two setup steps make the groups and data the calls look at: {@code produce} (topic,
 * partition, count: keyed records k-i/v-i) and {@code consumer} (a KafkaConsumer member in a
 * background thread: name, group, topics, protocol, assignor, instance_id; it commits what it
 * reads; the step returns once the member has partitions, or, with {@code min_records}, has
 * read that many), ended by {@code closeConsumer} (name).
 */
public final class Admin {
  private final Cli cli;
  private final org.apache.kafka.clients.admin.Admin admin;
  private KafkaProducer<String, String> producer;
  private final Map<String, Member> members = new HashMap<>();

  private Admin(Cli cli) {
    this.cli = cli;
    Properties p = cli.clientProps();
    p.putIfAbsent("default.api.timeout.ms", "30000");
    this.admin = org.apache.kafka.clients.admin.Admin.create(p);
  }

  // ---------------------------------------------------------------- helpers

  private static ObjectNode obj() {
    return Cli.JSON.createObjectNode();
  }

  private static ArrayNode arr() {
    return Cli.JSON.createArrayNode();
  }

  private static List<String> strings(JsonNode n) {
    List<String> out = new ArrayList<>();
    if (n != null && !n.isNull()) {
      n.forEach(x -> out.add(x.asText()));
    }
    return out;
  }

  private static TopicPartition tp(JsonNode pair) {
    return new TopicPartition(pair.get(0).asText(), pair.get(1).asInt());
  }

  private static String key(TopicPartition tp) {
    return tp.topic() + ":" + tp.partition();
  }

  /** The future's value put through {@code f}, or the error as {"error", "message"}. */
  private static <T> JsonNode item(KafkaFuture<T> future, Function<T, JsonNode> f) {
    try {
      return f.apply(future.get(30, TimeUnit.SECONDS));
    } catch (Exception e) {
      ObjectNode n = obj();
      Cli.putError(n, e);
      return n;
    }
  }

  private static JsonNode okNode(Object ignored) {
    return obj().put("ok", true);
  }

  private static String text(JsonNode step, String field, String fallback) {
    JsonNode n = step.get(field);
    return n == null || n.isNull() ? fallback : n.asText();
  }

  private static ArrayNode assignment(Collection<TopicPartition> tps) {
    return Consume.partitions(tps);
  }

  private static <E extends Enum<E>> E enumOf(Class<E> type, String name) {
    return Enum.valueOf(type, name.toUpperCase(Locale.ROOT).replace('-', '_'));
  }

  // ---------------------------------------------------------------- topics

  /** topics: [{name, partitions, replication (optional), configs {}}], validate_only. */
  private JsonNode createTopics(JsonNode step) throws Exception {
    List<NewTopic> topics = new ArrayList<>();
    for (JsonNode t : step.get("topics")) {
      Optional<Integer> parts =
          t.has("partitions") ? Optional.of(t.get("partitions").asInt()) : Optional.empty();
      Optional<Short> rf =
          t.has("replication")
              ? Optional.of((short) t.get("replication").asInt())
              : Optional.empty();
      NewTopic nt = new NewTopic(t.get("name").asText(), parts, rf);
      if (t.has("configs")) {
        Map<String, String> configs = new HashMap<>();
        t.get("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
        nt.configs(configs);
      }
      topics.add(nt);
    }
    CreateTopicsOptions opts =
        new CreateTopicsOptions().validateOnly(step.path("validate_only").asBoolean(false));
    CreateTopicsResult r = admin.createTopics(topics, opts);
    ObjectNode out = obj();
    for (NewTopic t : topics) {
      String name = t.name();
      out.set(
          name,
          item(
              r.values().get(name),
              v -> {
                ObjectNode n = obj().put("ok", true);
                n.set("partitions", item(r.numPartitions(name), Cli.JSON::valueToTree));
                n.set("replication", item(r.replicationFactor(name), Cli.JSON::valueToTree));
                return n;
              }));
    }
    return out;
  }

  /** topics: [names]. */
  private JsonNode deleteTopics(JsonNode step) {
    ObjectNode out = obj();
    admin
        .deleteTopics(strings(step.get("topics")))
        .topicNameValues()
        .forEach((name, f) -> out.set(name, item(f, Admin::okNode)));
    return sorted(out);
  }

  /** internal (bool), prefix: only names starting with it (the reference broker is shared). */
  private JsonNode listTopics(JsonNode step) throws Exception {
    String prefix = text(step, "prefix", "");
    Set<String> names =
        admin
            .listTopics(new ListTopicsOptions().listInternal(step.path("internal").asBoolean(false)))
            .names()
            .get();
    ArrayNode out = arr();
    names.stream().filter(n -> n.startsWith(prefix)).sorted().forEach(out::add);
    return out;
  }

  /** topics: [names]. */
  private JsonNode describeTopics(JsonNode step) {
    ObjectNode out = obj();
    admin
        .describeTopics(strings(step.get("topics")))
        .topicNameValues()
        .forEach(
            (name, f) ->
                out.set(
                    name,
                    item(
                        f,
                        (TopicDescription d) -> {
                          ObjectNode n = obj();
                          n.put("name", d.name());
                          n.put("internal", d.isInternal());
                          n.put("has_topic_id", d.topicId() != null && !d.topicId().toString().isEmpty());
                          ArrayNode parts = n.putArray("partitions");
                          for (TopicPartitionInfo p : d.partitions()) {
                            ObjectNode pn = parts.addObject();
                            pn.put("partition", p.partition());
                            pn.put("leader", p.leader() == null ? null : p.leader().id());
                            pn.set("replicas", ids(p.replicas()));
                            pn.set("isr", ids(p.isr()));
                          }
                          return n;
                        })));
    return sorted(out);
  }

  private static ArrayNode ids(List<Node> nodes) {
    ArrayNode a = arr();
    nodes.forEach(n -> a.add(n.id()));
    return a;
  }

  /** counts: {topic: new total}. */
  private JsonNode createPartitions(JsonNode step) {
    Map<String, NewPartitions> req = new LinkedHashMap<>();
    step.get("counts")
        .fields()
        .forEachRemaining(e -> req.put(e.getKey(), NewPartitions.increaseTo(e.getValue().asInt())));
    ObjectNode out = obj();
    admin.createPartitions(req).values().forEach((t, f) -> out.set(t, item(f, Admin::okNode)));
    return sorted(out);
  }

  /** records: [[topic, partition, before_offset]]. */
  private JsonNode deleteRecords(JsonNode step) {
    Map<TopicPartition, RecordsToDelete> req = new LinkedHashMap<>();
    for (JsonNode r : step.get("records")) {
      req.put(tp(r), RecordsToDelete.beforeOffset(r.get(2).asLong()));
    }
    ObjectNode out = obj();
    admin
        .deleteRecords(req)
        .lowWatermarks()
        .forEach(
            (tp, f) ->
                out.set(key(tp), item(f, d -> obj().put("low_watermark", d.lowWatermark()))));
    return sorted(out);
  }

  /** partitions: [[topic, partition]], spec: earliest|latest|max-timestamp|timestamp:MS. */
  private JsonNode listOffsets(JsonNode step) {
    String spec = text(step, "spec", "latest");
    OffsetSpec os =
        switch (spec) {
          case "earliest" -> OffsetSpec.earliest();
          case "latest" -> OffsetSpec.latest();
          case "max-timestamp" -> OffsetSpec.maxTimestamp();
          case "earliest-local" -> OffsetSpec.earliestLocal();
          case "latest-tiered" -> OffsetSpec.latestTiered();
          default -> OffsetSpec.forTimestamp(Long.parseLong(spec.substring("timestamp:".length())));
        };
    Map<TopicPartition, OffsetSpec> req = new LinkedHashMap<>();
    for (JsonNode p : step.get("partitions")) {
      req.put(tp(p), os);
    }
    ListOffsetsResult r = admin.listOffsets(req);
    ObjectNode out = obj();
    for (TopicPartition tp : req.keySet()) {
      out.set(
          key(tp),
          item(
              r.partitionResult(tp),
              (ListOffsetsResult.ListOffsetsResultInfo i) -> {
                ObjectNode n = obj().put("offset", i.offset()).put("timestamp", i.timestamp());
                n.put("leader_epoch", i.leaderEpoch().orElse(null));
                return n;
              }));
    }
    return out;
  }

  /** brokers: [ids] (default: every node); topics: only their partitions are listed. */
  private JsonNode describeLogDirs(JsonNode step) throws Exception {
    List<Integer> brokers = new ArrayList<>();
    if (step.has("brokers")) {
      step.get("brokers").forEach(b -> brokers.add(b.asInt()));
    } else {
      admin.describeCluster().nodes().get().forEach(n -> brokers.add(n.id()));
    }
    Set<String> topics = new HashSet<>(strings(step.get("topics")));
    ObjectNode out = obj();
    Map<Integer, Map<String, LogDirDescription>> all = admin.describeLogDirs(brokers).allDescriptions().get();
    for (Map.Entry<Integer, Map<String, LogDirDescription>> b : new TreeMap<>(all).entrySet()) {
      ObjectNode bn = out.putObject(String.valueOf(b.getKey()));
      bn.put("log_dirs", b.getValue().size());
      ObjectNode parts = bn.putObject("partitions");
      ArrayNode errors = bn.putArray("errors");
      for (LogDirDescription d : b.getValue().values()) {
        if (d.error() != null) {
          errors.add(d.error().getClass().getName());
        }
        bn.put("total_bytes_known", d.totalBytes().isPresent());
        for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
          if (topics.isEmpty() || topics.contains(r.getKey().topic())) {
            ObjectNode rn = obj();
            rn.put("size", r.getValue().size());
            rn.put("offset_lag", r.getValue().offsetLag());
            rn.put("future", r.getValue().isFuture());
            parts.set(key(r.getKey()), rn);
          }
        }
      }
      bn.set("partitions", sorted(parts));
    }
    return out;
  }

  private JsonNode describeCluster(JsonNode step) throws Exception {
    DescribeClusterResult r = admin.describeCluster();
    ObjectNode out = obj();
    String id = r.clusterId().get();
    out.put("has_cluster_id", id != null && !id.isEmpty());
    Node controller = r.controller().get();
    out.put("controller", controller == null ? null : controller.id());
    ArrayNode nodes = out.putArray("nodes");
    r.nodes().get().stream()
        .sorted(Comparator.comparingInt(Node::id))
        .forEach(
            n -> nodes.addObject().put("id", n.id()).put("host", n.host()).put("port", n.port()).put("rack", n.rack()));
    return out;
  }

  // ---------------------------------------------------------------- configs

  private static ConfigResource resource(JsonNode r) {
    return new ConfigResource(enumOf(ConfigResource.Type.class, r.get("type").asText()), r.get("name").asText());
  }

  /**
   * resources: [{type: topic|broker|broker_logger|group, name, keys: [names] (optional: only
   * these entries), count: true (optional: also the number of entries)}].
   */
  private JsonNode describeConfigs(JsonNode step) {
    List<ConfigResource> resources = new ArrayList<>();
    Map<ConfigResource, Set<String>> keys = new HashMap<>();
    Set<ConfigResource> counted = new HashSet<>();
    for (JsonNode r : step.get("resources")) {
      ConfigResource cr = resource(r);
      resources.add(cr);
      if (r.path("count").asBoolean(false)) {
        counted.add(cr);
      }
      if (r.has("keys")) {
        keys.put(cr, new HashSet<>(strings(r.get("keys"))));
      }
    }
    ObjectNode out = obj();
    Map<ConfigResource, KafkaFuture<Config>> values = admin.describeConfigs(resources).values();
    for (ConfigResource cr : resources) {
      out.set(
          cr.type().name().toLowerCase(Locale.ROOT) + ":" + cr.name(),
          item(
              values.get(cr),
              (Config c) -> {
                ObjectNode n = obj();
                Set<String> want = keys.get(cr);
                c.entries().stream()
                    .filter(e -> want == null || want.contains(e.name()))
                    .sorted(Comparator.comparing(ConfigEntry::name))
                    .forEach(
                        e -> {
                          ObjectNode en = n.putObject(e.name());
                          en.put("value", e.value());
                          en.put("source", e.source().name());
                          en.put("read_only", e.isReadOnly());
                          en.put("sensitive", e.isSensitive());
                          en.put("type", e.type().name());
                        });
                if (counted.contains(cr)) {
                  n.put("entries", c.entries().size());
                }
                return n;
              }));
    }
    return out;
  }

  /** resources: [{type, name, ops: [{name, op: set|delete|append|subtract, value}]}]. */
  private JsonNode incrementalAlterConfigs(JsonNode step) {
    Map<ConfigResource, Collection<AlterConfigOp>> req = new LinkedHashMap<>();
    for (JsonNode r : step.get("resources")) {
      List<AlterConfigOp> ops = new ArrayList<>();
      for (JsonNode o : r.get("ops")) {
        ops.add(
            new AlterConfigOp(
                new ConfigEntry(o.get("name").asText(), text(o, "value", null)),
                enumOf(AlterConfigOp.OpType.class, o.get("op").asText())));
      }
      req.put(resource(r), ops);
    }
    ObjectNode out = obj();
    admin
        .incrementalAlterConfigs(
            req,
            new org.apache.kafka.clients.admin.AlterConfigsOptions()
                .validateOnly(step.path("validate_only").asBoolean(false)))
        .values()
        .forEach(
            (cr, f) ->
                out.set(cr.type().name().toLowerCase(Locale.ROOT) + ":" + cr.name(), item(f, Admin::okNode)));
    return out;
  }

  // ---------------------------------------------------------------- groups

  /** types: [classic|consumer|...] (optional), states: [...] (optional), prefix. */
  private JsonNode listGroups(JsonNode step) throws Exception {
    ListGroupsOptions opts = new ListGroupsOptions();
    if (step.has("types")) {
      Set<GroupType> types = new HashSet<>();
      strings(step.get("types")).forEach(t -> types.add(GroupType.parse(t)));
      opts = opts.withTypes(types);
    }
    if (step.has("states")) {
      Set<GroupState> states = new HashSet<>();
      strings(step.get("states")).forEach(s -> states.add(GroupState.parse(s)));
      opts = opts.inGroupStates(states);
    }
    if (step.path("consumer_groups").asBoolean(false)) {
      opts = ListGroupsOptions.forConsumerGroups();
    }
    String prefix = text(step, "prefix", "");
    ArrayNode out = arr();
    admin.listGroups(opts).all().get().stream()
        .filter(g -> g.groupId().startsWith(prefix))
        .sorted(Comparator.comparing(GroupListing::groupId))
        .forEach(
            g ->
                out.addObject()
                    .put("group", g.groupId())
                    .put("type", g.type().map(GroupType::toString).orElse(null))
                    .put("state", g.groupState().map(GroupState::toString).orElse(null))
                    .put("protocol", g.protocol())
                    .put("simple", g.isSimpleConsumerGroup()));
    return out;
  }

  /** The deprecated listConsumerGroups: prefix. */
  @SuppressWarnings("deprecation")
  private JsonNode listConsumerGroups(JsonNode step) throws Exception {
    String prefix = text(step, "prefix", "");
    ArrayNode out = arr();
    admin.listConsumerGroups().all().get().stream()
        .filter(g -> g.groupId().startsWith(prefix))
        .sorted(Comparator.comparing(ConsumerGroupListing::groupId))
        .forEach(
            g ->
                out.addObject()
                    .put("group", g.groupId())
                    .put("type", g.type().map(GroupType::toString).orElse(null))
                    .put("state", g.groupState().map(GroupState::toString).orElse(null))
                    .put("simple", g.isSimpleConsumerGroup()));
    return out;
  }

  private static ArrayNode memberAssignment(MemberAssignment a) {
    return assignment(a.topicPartitions());
  }

  /** groups: [ids]; until_state: describe again (up to timeout_ms) until every group is in it. */
  private JsonNode describeConsumerGroups(JsonNode step) throws Exception {
    List<String> groups = strings(step.get("groups"));
    String until = text(step, "until_state", null);
    long deadline = System.currentTimeMillis() + step.path("timeout_ms").asLong(20000);
    while (true) {
      ObjectNode out = obj();
      boolean reached = true;
      Map<String, KafkaFuture<ConsumerGroupDescription>> described =
          admin.describeConsumerGroups(groups).describedGroups();
      for (String g : groups) {
        JsonNode n = item(described.get(g), Admin::group);
        out.set(g, n);
        reached &= until == null || until.equals(n.path("state").asText());
      }
      if (reached || System.currentTimeMillis() > deadline) {
        return out;
      }
      Thread.sleep(100);
    }
  }

  private static JsonNode group(ConsumerGroupDescription d) {
    ObjectNode n = obj();
    n.put("group", d.groupId());
    n.put("simple", d.isSimpleConsumerGroup());
    n.put("type", d.type().toString());
    n.put("state", d.groupState().toString());
    n.put("assignor", d.partitionAssignor());
    n.put("coordinator", d.coordinator() == null ? null : d.coordinator().id());
    n.put("group_epoch", d.groupEpoch().orElse(null));
    n.put("target_assignment_epoch", d.targetAssignmentEpoch().orElse(null));
    ArrayNode members = n.putArray("members");
    d.members().stream()
        .sorted(Comparator.comparing(MemberDescription::clientId).thenComparing(MemberDescription::consumerId))
        .forEach(
            m -> {
              ObjectNode mn = members.addObject();
              mn.put("member_id", m.consumerId());
              mn.put("instance_id", m.groupInstanceId().orElse(null));
              mn.put("client_id", m.clientId());
              mn.put("host", m.host());
              mn.set("assignment", memberAssignment(m.assignment()));
              mn.set("target_assignment", m.targetAssignment().map(Admin::memberAssignment).orElse(null));
              mn.put("member_epoch", m.memberEpoch().orElse(null));
              mn.put("upgraded", m.upgraded().orElse(null));
            });
    return n;
  }

  /** group. */
  private JsonNode listConsumerGroupOffsets(JsonNode step) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> offsets =
        admin.listConsumerGroupOffsets(step.get("group").asText()).partitionsToOffsetAndMetadata().get();
    ObjectNode out = obj();
    offsets.forEach(
        (tp, om) -> {
          if (om == null) {
            out.putNull(key(tp));
          } else {
            out.putObject(key(tp))
                .put("offset", om.offset())
                .put("metadata", om.metadata())
                .put("leader_epoch", om.leaderEpoch().orElse(null));
          }
        });
    return sorted(out);
  }

  /** group, offsets: [[topic, partition, offset]]. */
  private JsonNode alterConsumerGroupOffsets(JsonNode step) {
    Map<TopicPartition, OffsetAndMetadata> req = new LinkedHashMap<>();
    for (JsonNode o : step.get("offsets")) {
      req.put(tp(o), new OffsetAndMetadata(o.get(2).asLong(), text(step, "metadata", "")));
    }
    var r = admin.alterConsumerGroupOffsets(step.get("group").asText(), req);
    ObjectNode out = obj();
    out.set("all", item(r.all(), Admin::okNode));
    ObjectNode parts = out.putObject("partitions");
    req.keySet().forEach(tp -> parts.set(key(tp), item(r.partitionResult(tp), Admin::okNode)));
    return out;
  }

  /** group, partitions: [[topic, partition]]. */
  private JsonNode deleteConsumerGroupOffsets(JsonNode step) {
    Set<TopicPartition> req = new java.util.LinkedHashSet<>();
    step.get("partitions").forEach(p -> req.add(tp(p)));
    var r = admin.deleteConsumerGroupOffsets(step.get("group").asText(), req);
    ObjectNode out = obj();
    out.set("all", item(r.all(), Admin::okNode));
    ObjectNode parts = out.putObject("partitions");
    req.forEach(tp -> parts.set(key(tp), item(r.partitionResult(tp), Admin::okNode)));
    return out;
  }

  /** groups: [ids]. */
  private JsonNode deleteConsumerGroups(JsonNode step) {
    ObjectNode out = obj();
    admin
        .deleteConsumerGroups(strings(step.get("groups")))
        .deletedGroups()
        .forEach((g, f) -> out.set(g, item(f, Admin::okNode)));
    return sorted(out);
  }

  // ---------------------------------------------------------------- ACLs and SCRAM

  private static AclBinding binding(JsonNode a) {
    return new AclBinding(
        new ResourcePattern(
            enumOf(ResourceType.class, a.get("resource_type").asText()),
            a.get("name").asText(),
            enumOf(PatternType.class, text(a, "pattern", "literal"))),
        new AccessControlEntry(
            a.get("principal").asText(),
            text(a, "host", "*"),
            enumOf(AclOperation.class, a.get("operation").asText()),
            enumOf(AclPermissionType.class, text(a, "permission", "allow"))));
  }

  /** Any field left out matches anything. */
  private static AclBindingFilter filter(JsonNode f) {
    return new AclBindingFilter(
        new ResourcePatternFilter(
            enumOf(ResourceType.class, text(f, "resource_type", "any")),
            text(f, "name", null),
            enumOf(PatternType.class, text(f, "pattern", "any"))),
        new AccessControlEntryFilter(
            text(f, "principal", null),
            text(f, "host", null),
            enumOf(AclOperation.class, text(f, "operation", "any")),
            enumOf(AclPermissionType.class, text(f, "permission", "any"))));
  }

  private static ObjectNode bindingNode(AclBinding b) {
    ObjectNode n = obj();
    n.put("resource_type", b.pattern().resourceType().name());
    n.put("name", b.pattern().name());
    n.put("pattern", b.pattern().patternType().name());
    n.put("principal", b.entry().principal());
    n.put("host", b.entry().host());
    n.put("operation", b.entry().operation().name());
    n.put("permission", b.entry().permissionType().name());
    return n;
  }

  private static ArrayNode bindings(Collection<AclBinding> bs) {
    ArrayNode a = arr();
    bs.stream().map(Admin::bindingNode).sorted(Comparator.comparing(JsonNode::toString)).forEach(a::add);
    return a;
  }

  /** acls: [{resource_type, name, pattern, principal, host, operation, permission}]. */
  private JsonNode createAcls(JsonNode step) {
    List<AclBinding> req = new ArrayList<>();
    step.get("acls").forEach(a -> req.add(binding(a)));
    Map<AclBinding, KafkaFuture<Void>> values = admin.createAcls(req).values();
    ArrayNode out = arr();
    req.forEach(b -> out.add(item(values.get(b), Admin::okNode)));
    return out;
  }

  /** filter: {resource_type, name, pattern, principal, host, operation, permission}. */
  private JsonNode describeAcls(JsonNode step) throws Exception {
    return bindings(admin.describeAcls(filter(step.path("filter"))).values().get());
  }

  /** filters: [filter]: per filter, the bindings it deleted (each with its own error). */
  private JsonNode deleteAcls(JsonNode step) {
    List<AclBindingFilter> req = new ArrayList<>();
    step.get("filters").forEach(f -> req.add(filter(f)));
    Map<AclBindingFilter, KafkaFuture<DeleteAclsResult.FilterResults>> values =
        admin.deleteAcls(req).values();
    ArrayNode out = arr();
    for (AclBindingFilter f : req) {
      out.add(
          item(
              values.get(f),
              (DeleteAclsResult.FilterResults r) -> {
                ArrayNode deleted = arr();
                r.values().stream()
                    .map(
                        fr -> {
                          ObjectNode n =
                              fr.binding() == null ? obj() : bindingNode(fr.binding());
                          if (fr.exception() != null) {
                            Cli.putError(n, fr.exception());
                          }
                          return n;
                        })
                    .sorted(Comparator.comparing(JsonNode::toString))
                    .forEach(deleted::add);
                return obj().set("deleted", deleted);
              }));
    }
    return out;
  }

  /** alterations: [{user, mechanism, iterations, password} or {user, mechanism, delete: true}]. */
  private JsonNode alterUserScramCredentials(JsonNode step) {
    List<UserScramCredentialAlteration> req = new ArrayList<>();
    for (JsonNode a : step.get("alterations")) {
      ScramMechanism mech = ScramMechanism.fromMechanismName(a.get("mechanism").asText());
      if (a.path("delete").asBoolean(false)) {
        req.add(new UserScramCredentialDeletion(a.get("user").asText(), mech));
      } else {
        req.add(
            new UserScramCredentialUpsertion(
                a.get("user").asText(),
                new ScramCredentialInfo(mech, a.path("iterations").asInt(4096)),
                a.get("password").asText()));
      }
    }
    ObjectNode out = obj();
    admin.alterUserScramCredentials(req).values().forEach((u, f) -> out.set(u, item(f, Admin::okNode)));
    return sorted(out);
  }

  /** users: [names] (optional: every user). */
  private JsonNode describeUserScramCredentials(JsonNode step) throws Exception {
    List<String> users = strings(step.get("users"));
    var r = admin.describeUserScramCredentials(users.isEmpty() ? null : users);
    ObjectNode out = obj();
    List<String> names = users.isEmpty() ? r.users().get() : users;
    for (String u : names) {
      out.set(
          u,
          item(
              r.description(u),
              (UserScramCredentialsDescription d) -> {
                ArrayNode creds = arr();
                d.credentialInfos().stream()
                    .sorted(Comparator.comparing(c -> c.mechanism().mechanismName()))
                    .forEach(c -> creds.addArray().add(c.mechanism().mechanismName()).add(c.iterations()));
                return obj().set("credentials", creds);
              }));
    }
    return sorted(out);
  }

  // ---------------------------------------------------------------- setup steps

  /** topic, partition (optional), count: records with keys k-i and values v-i. */
  private JsonNode produce(JsonNode step) throws Exception {
    if (producer == null) {
      Properties p = cli.clientProps();
      p.put("key.serializer", StringSerializer.class.getName());
      p.put("value.serializer", StringSerializer.class.getName());
      producer = new KafkaProducer<>(p);
    }
    String topic = step.get("topic").asText();
    Integer partition = step.has("partition") ? step.get("partition").asInt() : null;
    int count = step.path("count").asInt(1);
    List<java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata>> sent = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      sent.add(producer.send(new ProducerRecord<>(topic, partition, "k-" + i, "v-" + i)));
    }
    ObjectNode out = obj();
    Map<String, Long> last = new TreeMap<>();
    for (var f : sent) {
      var m = f.get(30, TimeUnit.SECONDS);
      last.merge(m.topic() + ":" + m.partition(), m.offset() + 1, Math::max);
    }
    last.forEach(out::put);
    return out;
  }

  /** A group member in its own thread: it polls, commits what it read, until closed. */
  private final class Member implements Runnable {
    final KafkaConsumer<String, String> consumer;
    final List<String> topics;
    volatile boolean stop;
    volatile Set<TopicPartition> assignment = Set.of();
    volatile long read;
    volatile Throwable failure;
    final Thread thread = new Thread(this, "member");

    Member(JsonNode step) {
      Properties p = cli.clientProps();
      p.put("key.deserializer", StringDeserializer.class.getName());
      p.put("value.deserializer", StringDeserializer.class.getName());
      p.put("group.id", step.get("group").asText());
      p.put("auto.offset.reset", "earliest");
      p.put("enable.auto.commit", "false");
      String protocol = text(step, "protocol", "classic");
      p.put("group.protocol", protocol);
      p.put("client.id", text(step, "client_id", step.get("name").asText()));
      String assignor = text(step, "assignor", null);
      if (assignor != null) {
        if (protocol.equals("consumer")) {
          p.put("group.remote.assignor", assignor);
        } else {
          p.put("partition.assignment.strategy", Consume.classicAssignor(assignor));
        }
      }
      String instance = text(step, "instance_id", null);
      if (instance != null) {
        p.put("group.instance.id", instance);
      }
      this.consumer = new KafkaConsumer<>(p);
      this.topics = strings(step.get("topics"));
    }

    @Override
    public void run() {
      try {
        consumer.subscribe(topics);
        while (!stop) {
          ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
          if (!batch.isEmpty()) {
            consumer.commitSync();
            read += batch.count();
          }
          assignment = Set.copyOf(consumer.assignment());
        }
      } catch (Throwable t) {
        failure = t;
      } finally {
        consumer.close();
      }
    }
  }

  /** name, group, topics, protocol, assignor, instance_id, client_id, min_records, timeout_ms. */
  private JsonNode consumer(JsonNode step) throws Exception {
    Member m = new Member(step);
    members.put(step.get("name").asText(), m);
    m.thread.setDaemon(true);
    m.thread.start();
    long deadline = System.currentTimeMillis() + step.path("timeout_ms").asLong(30000);
    long min = step.path("min_records").asLong(0);
    while (m.failure == null && (m.assignment.isEmpty() || m.read < min)) {
      if (System.currentTimeMillis() > deadline) {
        throw new IllegalStateException("member " + step.get("name").asText() + " not ready: assigned "
            + m.assignment + ", read " + m.read);
      }
      Thread.sleep(50);
    }
    if (m.failure != null) {
      throw new IllegalStateException(m.failure);
    }
    ObjectNode out = obj();
    out.set("assignment", assignment(m.assignment));
    out.put("read", m.read);
    return out;
  }

  /** name. */
  private JsonNode closeConsumer(JsonNode step) throws Exception {
    Member m = members.remove(step.get("name").asText());
    m.stop = true;
    m.consumer.wakeup();
    m.thread.join(30000);
    return obj().put("read", m.read);
  }

  // ---------------------------------------------------------------- driver

  private static ObjectNode sorted(ObjectNode n) {
    ObjectNode out = obj();
    new TreeMap<String, JsonNode>(toMap(n)).forEach(out::set);
    return out;
  }

  private static Map<String, JsonNode> toMap(ObjectNode n) {
    Map<String, JsonNode> m = new HashMap<>();
    n.fields().forEachRemaining(e -> m.put(e.getKey(), e.getValue()));
    return m;
  }

  private JsonNode call(JsonNode step) throws Exception {
    String op = step.get("op").asText();
    return switch (op) {
      case "createTopics" -> createTopics(step);
      case "deleteTopics" -> deleteTopics(step);
      case "listTopics" -> listTopics(step);
      case "describeTopics" -> describeTopics(step);
      case "createPartitions" -> createPartitions(step);
      case "deleteRecords" -> deleteRecords(step);
      case "listOffsets" -> listOffsets(step);
      case "describeLogDirs" -> describeLogDirs(step);
      case "describeCluster" -> describeCluster(step);
      case "describeConfigs" -> describeConfigs(step);
      case "incrementalAlterConfigs" -> incrementalAlterConfigs(step);
      case "listGroups" -> listGroups(step);
      case "listConsumerGroups" -> listConsumerGroups(step);
      case "describeConsumerGroups" -> describeConsumerGroups(step);
      case "listConsumerGroupOffsets" -> listConsumerGroupOffsets(step);
      case "alterConsumerGroupOffsets" -> alterConsumerGroupOffsets(step);
      case "deleteConsumerGroupOffsets" -> deleteConsumerGroupOffsets(step);
      case "deleteConsumerGroups" -> deleteConsumerGroups(step);
      case "createAcls" -> createAcls(step);
      case "describeAcls" -> describeAcls(step);
      case "deleteAcls" -> deleteAcls(step);
      case "alterUserScramCredentials" -> alterUserScramCredentials(step);
      case "describeUserScramCredentials" -> describeUserScramCredentials(step);
      case "produce" -> produce(step);
      case "consumer" -> consumer(step);
      case "closeConsumer" -> closeConsumer(step);
      default -> throw new IllegalArgumentException("unknown op " + op);
    };
  }

  private void step(int n, String text) {
    ObjectNode out = Cli.event("result");
    out.put("step", n);
    try {
      JsonNode step = Cli.JSON.readTree(text);
      out.put("op", step.path("op").asText());
      if (step.has("label")) {
        out.set("label", step.get("label"));
      }
      JsonNode result = call(step);
      out.put("ok", true);
      out.set("result", result);
    } catch (Exception e) {
      out.put("ok", false);
      Cli.putError(out, e);
    }
    Cli.emit(out);
  }

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    Admin a = new Admin(cli);
    int n = 0;
    if (!cli.positional.isEmpty()) {
      for (String s : cli.positional) {
        a.step(n++, s);
      }
    } else {
      try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
        String line;
        while ((line = in.readLine()) != null) {
          if (!line.isBlank()) {
            a.step(n++, line);
          }
        }
      }
    }
    for (Member m : a.members.values()) {
      m.stop = true;
      m.consumer.wakeup();
      m.thread.join(30000);
    }
    if (a.producer != null) {
      a.producer.close();
    }
    a.admin.close(Duration.ofSeconds(10));
    Cli.emit(Cli.event("exit"));
    System.exit(0);
  }
}
