// Produce N keyed messages with kafkajs (acks=-1), then report kafkajs' view of the offsets.
// Values follow tests/integration/dataplane_kit.keyed_messages: "<key>:<seq>:" per key.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, count] = process.argv.slice(2);
  const n = parseInt(count, 10);
  const kafka = new Kafka({ clientId: "kgc-js-producer", brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const seq = new Map();
  let acked = 0;
  for (let start = 0; start < n; start += 500) {
    const messages = [];
    for (let i = start; i < Math.min(n, start + 500); i++) {
      const k = i % 60;
      const s = seq.get(k) || 0;
      seq.set(k, s + 1);
      messages.push({ key: `key-${k}`, value: `${k}:${s}:`.padEnd(32, ".") });
    }
    const res = await producer.send({ topic, messages, acks: -1 });
    for (const r of res) if (r.errorCode !== 0) throw new Error(JSON.stringify(r));
    acked += messages.length;
  }
  await producer.disconnect();
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  console.log(JSON.stringify({ acked, offsets }));
}

main().catch((err) => { console.error(err); process.exit(1); });
