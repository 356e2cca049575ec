"""aiokafka's AIOKafkaAdminClient against a real ``kgc serve``: the admin calls of issue 17
(DescribeCluster, DescribeConfigs, AlterConfigs, CreatePartitions, DeleteRecords) and the
group ones, each answered as Kafka answers them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
TOPIC = "aio-tools"


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


async def test_aiokafka_admin_calls_of_the_tools(kgc: KgcProcess) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kgc.bootstrap)
    await admin.start()
    producer = AIOKafkaProducer(bootstrap_servers=kgc.bootstrap)
    try:
        await admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
        await producer.start()
        for i in range(5):
            await producer.send_and_wait(TOPIC, f"v{i}".encode(), partition=0)

        cluster = await admin.describe_cluster()
        assert len(cluster["brokers"]) == 1 and cluster["cluster_id"]

        topic = ConfigResource(ConfigResourceType.TOPIC, TOPIC)
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={"retention.ms": "3600000"})]
        )
        (described,) = await admin.describe_configs([topic])
        entries = {e[0]: e[1] for e in described.resources[0][4]}
        assert entries["retention.ms"] == "3600000"
        assert entries["cleanup.policy"] == "delete"

        await admin.create_partitions({TOPIC: NewPartitions(total_count=3)})
        (meta,) = await admin.describe_topics([TOPIC])
        assert len(meta["partitions"]) == 3

        low = await admin.delete_records({TopicPartition(TOPIC, 0): RecordsToDelete(2)})
        assert low == {TopicPartition(TOPIC, 0): 2}
    finally:
        await producer.stop()
        await admin.close()
