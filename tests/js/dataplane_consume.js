// Consume N messages of a topic with a kafkajs consumer group, from the beginning, committing
// as it goes; print [partition, offset, key, value] per message as one JSON line at the end.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, group, topic, count] = process.argv.slice(2);
  const n = parseInt(count, 10);
  const kafka = new Kafka({ clientId: "kgc-js-dataplane", brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const seen = [];
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      seen.push([partition, Number(message.offset), message.key.toString(), message.value.toString()]);
      if (seen.length >= n) done();
    },
  });
  const timer = setTimeout(() => done(), 60000);
  await finished;
  clearTimeout(timer);
  await consumer.disconnect();
  console.log(JSON.stringify(seen));
}

main().catch((err) => { console.error(err); process.exit(1); });
