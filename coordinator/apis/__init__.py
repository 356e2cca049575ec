"""The API versions kgc serves, and nothing it does not.

How this works: this table is what ApiVersions advertises and what the server accepts; a
request outside it closes the connection, as Kafka does. The ranges are Kafka 4.x's, cut
where kgc deliberately stops (topic-id-based versions, OffsetCommit/OffsetFetch v10 among
them, are served because Metadata reports topic ids). ConsumerGroupHeartbeat and
ConsumerGroupDescribe serve KIP-848 consumer groups beside the classic APIs. The group,
offset and data-plane APIs (and CreateTopics/DeleteTopics) also serve the versions Kafka 4
dropped (KIP-896) from Kafka 3.9's first one, so clients from before Kafka 0.11 work.
"""

from __future__ import annotations

from protocol.messages import (
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_user_scram_credentials,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_config_resources,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
)

# api key -> (min, max) advertised.
SUPPORTED: dict[int, tuple[int, int]] = {
    # Kafka 3.9's ranges below Kafka 4's (KIP-896): magic 0/1 message sets for Produce
    # v0-2 and Fetch v0-3, ListOffsets v0's offset lists (dataplane/legacy.py).
    produce.API_KEY: (0, 12),
    fetch.API_KEY: (0, 17),
    list_offsets.API_KEY: (0, 10),
    metadata.API_KEY: (0, 12),
    offset_commit.API_KEY: (0, 10),
    offset_fetch.API_KEY: (0, 10),
    find_coordinator.API_KEY: (0, 6),
    join_group.API_KEY: (0, 9),
    heartbeat.API_KEY: (0, 4),
    leave_group.API_KEY: (0, 5),
    sync_group.API_KEY: (0, 5),
    describe_groups.API_KEY: (0, 6),
    list_groups.API_KEY: (0, 5),
    sasl_handshake.API_KEY: (0, 1),
    api_versions.API_KEY: (0, 4),
    create_topics.API_KEY: (0, 7),
    delete_topics.API_KEY: (0, 6),
    init_producer_id.API_KEY: (0, 5),
    txn_offset_commit.API_KEY: (0, 5),
    delete_groups.API_KEY: (0, 3),
    sasl_authenticate.API_KEY: (0, 2),
    offset_delete.API_KEY: (0, 0),
    consumer_group_heartbeat.API_KEY: (0, 1),
    consumer_group_describe.API_KEY: (0, 1),
    describe_user_scram_credentials.API_KEY: (0, 0),
    alter_user_scram_credentials.API_KEY: (0, 0),
    # Kafka 4 serves the ACL APIs from v1 (v0 knew only LITERAL patterns).
    describe_acls.API_KEY: (1, 3),
    create_acls.API_KEY: (1, 3),
    delete_acls.API_KEY: (1, 3),
    # The admin APIs tools call (issue 17), at Kafka 4.x's ranges.
    describe_configs.API_KEY: (1, 4),
    alter_configs.API_KEY: (0, 2),
    incremental_alter_configs.API_KEY: (0, 1),
    create_partitions.API_KEY: (0, 3),
    delete_records.API_KEY: (0, 2),
    describe_cluster.API_KEY: (0, 2),
    describe_log_dirs.API_KEY: (1, 5),
    # kafka-configs asks which groups have configs (KIP-1142; v0 was
    # ListClientMetricsResources).
    list_config_resources.API_KEY: (0, 1),
}
