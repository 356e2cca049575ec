"""The reference broker itself: it starts in KRaft combined mode and answers the protocol."""

from __future__ import annotations

import pytest
from support.kafkaserver import KafkaServer

from coordinator.tools.client import Connection
from protocol.messages import api_versions, metadata

pytestmark = pytest.mark.kafka


def test_broker_answers_api_versions_and_names_itself_in_metadata(
    kafka_broker: KafkaServer,
) -> None:
    with Connection.to(kafka_broker.bootstrap) as conn:
        conn.negotiate()
        _, versions = conn.request(
            18,
            api_versions.ApiVersionsRequest(
                client_software_name="kgc-tests", client_software_version="1.0"
            ),
        )
        assert versions.error_code == 0
        keys = {k.api_key for k in versions.api_keys}
        assert {10, 11, 12, 13, 14, 68} <= keys  # the group APIs, KIP-848's heartbeat
        _, meta = conn.request(3, metadata.MetadataRequest(topics=[]))
        assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [
            (1, "127.0.0.1", kafka_broker.port)
        ]
