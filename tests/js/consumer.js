// Join a consumer group with kafkajs, print the assignment as one JSON line, then leave.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, group, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kgc-js-consumer", brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500 });
  let assignment = null;
  consumer.on(consumer.events.GROUP_JOIN, (e) => { assignment = e.payload; });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({ eachMessage: async () => {} });
  const deadline = Date.now() + 30000;
  while (!assignment && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  await consumer.disconnect();
  if (!assignment) throw new Error("no assignment");
  console.log(JSON.stringify({ memberId: assignment.memberId, leaderId: assignment.leaderId,
    isLeader: assignment.isLeader, groupProtocol: assignment.groupProtocol,
    memberAssignment: assignment.memberAssignment }));
}

main().catch((err) => { console.error(err); process.exit(1); });
