// kafkajs's admin calls that tools make (issue 17), against one topic; prints one JSON line
// with what each call answered, or the error each raised.
const { Kafka, logLevel, ConfigResourceTypes } = require("kafkajs");

async function attempt(out, name, fn) {
  try {
    out[name] = { ok: await fn() };
  } catch (err) {
    out[name] = { error: err.type || err.name || String(err) };
  }
}

async function main() {
  const [bootstrap, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kgc-js-tools", brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  const producer = kafka.producer();
  await admin.connect();
  await producer.connect();
  const out = {};
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
  await producer.send({ topic, messages: [0, 1, 2, 3, 4].map((i) => ({ key: `k${i}`, value: `v${i}` })) });
  await attempt(out, "describeCluster", async () => {
    const c = await admin.describeCluster();
    return { brokers: c.brokers.length, clusterId: c.clusterId, controller: c.controller };
  });
  await attempt(out, "describeConfigs", async () => {
    const r = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ["retention.ms", "cleanup.policy"] }],
    });
    return Object.fromEntries(r.resources[0].configEntries.map((e) => [e.configName, e.configValue]));
  });
  await attempt(out, "alterConfigs", async () => {
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: "retention.ms", value: "3600000" }] }],
    });
    const r = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ["retention.ms"] }],
    });
    return r.resources[0].configEntries[0].configValue;
  });
  await attempt(out, "createPartitions", async () => {
    await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] });
    const meta = await admin.fetchTopicMetadata({ topics: [topic] });
    return meta.topics[0].partitions.length;
  });
  await attempt(out, "deleteTopicRecords", async () => {
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: "2" }] });
    const offsets = await admin.fetchTopicOffsets(topic);
    const p0 = offsets.find((o) => o.partition === 0);
    return { low: p0.low, high: p0.high };
  });
  await attempt(out, "listInternalTopic", async () => {
    const meta = await admin.fetchTopicMetadata({ topics: ["__consumer_offsets"] });
    return meta.topics[0].partitions.length;
  });
  await producer.disconnect();
  await admin.disconnect();
  console.log(JSON.stringify(out));
}

main().catch((err) => { console.error(err); process.exit(1); });
