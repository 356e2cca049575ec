// Create a topic and list topics with the kafkajs admin client; print one JSON line.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, partitions] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kgc-js-admin", brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: Number(partitions) }], waitForLeaders: true });
  const topics = await admin.listTopics();
  const meta = await admin.fetchTopicMetadata({ topics: [topic] });
  await admin.disconnect();
  console.log(JSON.stringify({ created, topics, partitions: meta.topics[0].partitions.length }));
}

main().catch((err) => { console.error(err); process.exit(1); });
