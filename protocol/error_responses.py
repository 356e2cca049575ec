"""Each API's answer to a request that fails as a whole: Kafka's ``getErrorResponse``.

How this works: ``ERROR_RESPONSES`` maps every API key kgc serves to a function
``(version, request, code) -> response`` that answers the request with ``code`` in the
API's own shape, as the request class of Kafka's clients module does it: a top-level
``error_code`` where the response has one, else the code in every entry the request named
(each topic-partition of a Produce, each group of a DescribeGroups, each resource of an
AlterConfigs...). ``error_response`` looks one up. Callers: the group runtime (a handler
that raised answers UNKNOWN), the API handlers (an authorization failure of the whole
request), the SASL gate (ILLEGAL_SASL_STATE for the group coordinator's APIs,
``COORDINATOR_KEYS``).

Nothing here knows a connection or a coordinator: it is the protocol's half of an answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_share_group_offsets,
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
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_group_history,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_transactions,
    describe_user_scram_credentials,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_config_resources,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    streams_group_describe,
    streams_group_heartbeat,
    streams_group_topology_description_update,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
)

__all__ = ["COORDINATOR_KEYS", "ERROR_RESPONSES", "ErrorShape", "error_response"]

# (version, request, code) -> the API's response carrying ``code`` for the whole request.
ErrorShape = Callable[[int, Any, ErrorCode], Any]


def error_response(api_key: int, version: int, req: Any, code: ErrorCode) -> Any:
    """The answer of API ``api_key`` to ``req`` failing as a whole with ``code``."""
    shape = ERROR_RESPONSES.get(api_key)
    if shape is None:
        raise ValueError(f"no error response for api key {api_key}")
    return shape(version, req, code)


# -- the group coordinator's APIs


def _offset_commit(version: int, req: Any, code: ErrorCode) -> Any:
    return offset_commit.Response(
        topics=[
            offset_commit.OffsetCommitResponseTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    offset_commit.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def _txn_offset_commit(version: int, req: Any, code: ErrorCode) -> Any:
    return txn_offset_commit.Response(
        topics=[
            txn_offset_commit.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    txn_offset_commit.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def _offset_fetch(version: int, req: Any, code: ErrorCode) -> Any:
    if version >= 8:
        return offset_fetch.Response(
            groups=[
                offset_fetch.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                for g in req.groups
            ]
        )
    if version >= 2:
        return offset_fetch.Response(error_code=code)
    return offset_fetch.Response(
        topics=[
            offset_fetch.OffsetFetchResponseTopic(
                name=t.name,
                partitions=[
                    offset_fetch.OffsetFetchResponsePartition(
                        partition_index=p, committed_offset=-1, error_code=code
                    )
                    for p in t.partition_indexes
                ],
            )
            for t in req.topics or []
        ]
    )


def _describe_groups(version: int, req: Any, code: ErrorCode) -> Any:
    return describe_groups.Response(
        groups=[describe_groups.DescribedGroup(error_code=code, group_id=g) for g in req.groups]
    )


def _delete_groups(version: int, req: Any, code: ErrorCode) -> Any:
    return delete_groups.Response(
        results=[
            delete_groups.DeletableGroupResult(group_id=g, error_code=code)
            for g in req.groups_names
        ]
    )


def _consumer_group_describe(version: int, req: Any, code: ErrorCode) -> Any:
    return consumer_group_describe.Response(
        groups=[
            consumer_group_describe.DescribedGroup(error_code=code, group_id=g)
            for g in req.group_ids
        ]
    )


def _streams_group_describe(version: int, req: Any, code: ErrorCode) -> Any:
    return streams_group_describe.Response(
        groups=[
            streams_group_describe.DescribedGroup(error_code=code, group_id=g)
            for g in req.group_ids
        ]
    )


def _share_group_describe(version: int, req: Any, code: ErrorCode) -> Any:
    return share_group_describe.Response(
        groups=[
            share_group_describe.DescribedGroup(error_code=code, group_id=g) for g in req.group_ids
        ]
    )


def _top_level(response: Callable[..., Any]) -> ErrorShape:
    """APIs whose response carries one ``error_code`` for the whole request."""

    def shape(version: int, req: Any, code: ErrorCode) -> Any:
        return response(error_code=code)

    return shape


# -- the data plane's APIs


def _produce(version: int, req: Any, code: ErrorCode) -> Any:
    return produce.Response(
        responses=[
            produce.TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    produce.PartitionProduceResponse(index=p.index, error_code=code)
                    for p in t.partition_data
                ],
            )
            for t in req.topic_data
        ]
    )


def _fetch(version: int, req: Any, code: ErrorCode) -> Any:
    # From v13 the top-level code alone; before, every partition carries it too.
    topics = (
        []
        if version >= 13
        else [
            fetch.FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    fetch.PartitionData(partition_index=p.partition, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )
    return fetch.Response(error_code=code, session_id=req.session_id, responses=topics)


def _list_offsets(version: int, req: Any, code: ErrorCode) -> Any:
    return list_offsets.Response(
        topics=[
            list_offsets.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    list_offsets.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def _init_producer_id(version: int, req: Any, code: ErrorCode) -> Any:
    return init_producer_id.Response(error_code=code, producer_id=-1, producer_epoch=-1)


# -- the transaction coordinator


def _add_partitions_to_txn(version: int, req: Any, code: ErrorCode) -> Any:
    """v0-3: the code on every partition; v4+ (brokers' batches): top level."""
    apt = add_partitions_to_txn
    if version >= 4:
        return apt.Response(error_code=code)
    return apt.Response(
        results_by_topic_v3_and_below=[
            apt.AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    apt.AddPartitionsToTxnResponseAddPartitionsToTxnTopicResultAddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in req.v3_and_below_topics
        ]
    )


def _end_txn(version: int, req: Any, code: ErrorCode) -> Any:
    return end_txn.Response(error_code=code, producer_id=-1, producer_epoch=-1)


def _describe_transactions(version: int, req: Any, code: ErrorCode) -> Any:
    return describe_transactions.Response(
        transaction_states=[
            describe_transactions.TransactionState(error_code=code, transactional_id=t)
            for t in req.transactional_ids
        ]
    )


# -- topics and the cluster


def _metadata(version: int, req: Any, code: ErrorCode) -> Any:
    return metadata.Response(
        topics=[
            metadata.MetadataResponseTopic(
                error_code=code, name=t.name, topic_id=t.topic_id, is_internal=False
            )
            for t in req.topics or []
        ]
    )


def _find_coordinator(version: int, req: Any, code: ErrorCode) -> Any:
    if version < 4:
        return find_coordinator.Response(error_code=code, node_id=-1, host="", port=-1)
    return find_coordinator.Response(
        coordinators=[
            find_coordinator.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
            for k in req.coordinator_keys
        ]
    )


def _create_topics(version: int, req: Any, code: ErrorCode) -> Any:
    return create_topics.Response(
        topics=[
            create_topics.CreatableTopicResult(name=t.name, error_code=code, error_message=None)
            for t in req.topics
        ]
    )


def _delete_topics(version: int, req: Any, code: ErrorCode) -> Any:
    if version >= 6:
        results = [
            delete_topics.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=code)
            for t in req.topics
        ]
    else:
        results = [
            delete_topics.DeletableTopicResult(name=n, error_code=code) for n in req.topic_names
        ]
    return delete_topics.Response(responses=results)


def _create_partitions(version: int, req: Any, code: ErrorCode) -> Any:
    return create_partitions.Response(
        results=[
            create_partitions.CreatePartitionsTopicResult(name=t.name, error_code=code)
            for t in req.topics
        ]
    )


def _delete_records(version: int, req: Any, code: ErrorCode) -> Any:
    return delete_records.Response(
        topics=[
            delete_records.DeleteRecordsTopicResult(
                name=t.name,
                partitions=[
                    delete_records.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=-1, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def _describe_log_dirs(version: int, req: Any, code: ErrorCode) -> Any:
    # The top-level code exists from v3; before, an empty answer.
    return describe_log_dirs.Response(error_code=code if version >= 3 else 0)


# -- configs, ACLs, SCRAM


def _describe_configs(version: int, req: Any, code: ErrorCode) -> Any:
    return describe_configs.Response(
        results=[
            describe_configs.DescribeConfigsResult(
                error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
            )
            for r in req.resources
        ]
    )


def _alter_configs(version: int, req: Any, code: ErrorCode) -> Any:
    return alter_configs.Response(
        responses=[
            alter_configs.AlterConfigsResourceResponse(
                error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
            )
            for r in req.resources
        ]
    )


def _incremental_alter_configs(version: int, req: Any, code: ErrorCode) -> Any:
    return incremental_alter_configs.Response(
        responses=[
            incremental_alter_configs.AlterConfigsResourceResponse(
                error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
            )
            for r in req.resources
        ]
    )


def _create_acls(version: int, req: Any, code: ErrorCode) -> Any:
    return create_acls.Response(
        results=[create_acls.AclCreationResult(error_code=code) for _ in req.creations]
    )


def _delete_acls(version: int, req: Any, code: ErrorCode) -> Any:
    return delete_acls.Response(
        filter_results=[delete_acls.DeleteAclsFilterResult(error_code=code) for _ in req.filters]
    )


def _alter_user_scram_credentials(version: int, req: Any, code: ErrorCode) -> Any:
    users = {d.name for d in req.deletions} | {u.name for u in req.upsertions}
    return alter_user_scram_credentials.Response(
        results=[
            alter_user_scram_credentials.AlterUserScramCredentialsResult(user=u, error_code=code)
            for u in sorted(users)
        ]
    )


def _write_txn_markers(version: int, req: Any, code: ErrorCode) -> Any:
    return write_txn_markers.Response(
        markers=[
            write_txn_markers.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=[
                    write_txn_markers.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            write_txn_markers.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=code
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for m in req.markers
        ]
    )


def _describe_producers(version: int, req: Any, code: ErrorCode) -> Any:
    return describe_producers.Response(
        topics=[
            describe_producers.TopicResponse(
                name=t.name,
                partitions=[
                    describe_producers.PartitionResponse(partition_index=p, error_code=code)
                    for p in t.partition_indexes
                ],
            )
            for t in req.topics
        ]
    )


def _share_state(module: Any, result: Any) -> ErrorShape:
    """The share coordinator's inter-broker APIs: the code in every partition named."""

    def shape(version: int, req: Any, code: ErrorCode) -> Any:
        return module.Response(
            results=[
                result(
                    topic_id=t.topic_id,
                    partitions=[
                        module.PartitionResult(partition=p.partition, error_code=code)
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        )

    return shape


ERROR_RESPONSES: dict[int, ErrorShape] = {
    produce.API_KEY: _produce,
    fetch.API_KEY: _fetch,
    list_offsets.API_KEY: _list_offsets,
    metadata.API_KEY: _metadata,
    offset_commit.API_KEY: _offset_commit,
    offset_fetch.API_KEY: _offset_fetch,
    find_coordinator.API_KEY: _find_coordinator,
    join_group.API_KEY: lambda v, req, code: join_group.Response(
        error_code=code, member_id=req.member_id
    ),
    heartbeat.API_KEY: _top_level(heartbeat.Response),
    leave_group.API_KEY: _top_level(leave_group.Response),
    sync_group.API_KEY: _top_level(sync_group.Response),
    describe_groups.API_KEY: _describe_groups,
    list_groups.API_KEY: _top_level(list_groups.Response),
    sasl_handshake.API_KEY: _top_level(sasl_handshake.Response),
    api_versions.API_KEY: _top_level(api_versions.Response),
    create_topics.API_KEY: _create_topics,
    delete_topics.API_KEY: _delete_topics,
    delete_records.API_KEY: _delete_records,
    init_producer_id.API_KEY: _init_producer_id,
    add_partitions_to_txn.API_KEY: _add_partitions_to_txn,
    add_offsets_to_txn.API_KEY: _top_level(add_offsets_to_txn.Response),
    end_txn.API_KEY: _end_txn,
    describe_transactions.API_KEY: _describe_transactions,
    list_transactions.API_KEY: _top_level(list_transactions.Response),
    txn_offset_commit.API_KEY: _txn_offset_commit,
    describe_acls.API_KEY: _top_level(describe_acls.Response),
    create_acls.API_KEY: _create_acls,
    delete_acls.API_KEY: _delete_acls,
    describe_configs.API_KEY: _describe_configs,
    alter_configs.API_KEY: _alter_configs,
    describe_log_dirs.API_KEY: _describe_log_dirs,
    sasl_authenticate.API_KEY: _top_level(sasl_authenticate.Response),
    create_partitions.API_KEY: _create_partitions,
    delete_groups.API_KEY: _delete_groups,
    incremental_alter_configs.API_KEY: _incremental_alter_configs,
    offset_delete.API_KEY: _top_level(offset_delete.Response),
    describe_user_scram_credentials.API_KEY: _top_level(describe_user_scram_credentials.Response),
    alter_user_scram_credentials.API_KEY: _alter_user_scram_credentials,
    describe_cluster.API_KEY: _top_level(describe_cluster.Response),
    consumer_group_heartbeat.API_KEY: _top_level(consumer_group_heartbeat.Response),
    streams_group_heartbeat.API_KEY: _top_level(streams_group_heartbeat.Response),
    streams_group_describe.API_KEY: _streams_group_describe,
    streams_group_topology_description_update.API_KEY: _top_level(
        streams_group_topology_description_update.Response
    ),
    consumer_group_describe.API_KEY: _consumer_group_describe,
    list_config_resources.API_KEY: _top_level(list_config_resources.Response),
    write_txn_markers.API_KEY: _write_txn_markers,
    describe_producers.API_KEY: _describe_producers,
    share_fetch.API_KEY: _top_level(share_fetch.Response),
    share_acknowledge.API_KEY: _top_level(share_acknowledge.Response),
    alter_share_group_offsets.API_KEY: _top_level(alter_share_group_offsets.Response),
    delete_share_group_offsets.API_KEY: _top_level(delete_share_group_offsets.Response),
    describe_share_group_offsets.API_KEY: lambda v, req, code: (
        describe_share_group_offsets.Response(
            groups=[
                describe_share_group_offsets.DescribeShareGroupOffsetsResponseGroup(
                    group_id=g.group_id, error_code=code
                )
                for g in req.groups
            ]
        )
    ),
    describe_group_history.API_KEY: _top_level(describe_group_history.Response),
    share_group_heartbeat.API_KEY: _top_level(share_group_heartbeat.Response),
    share_group_describe.API_KEY: _share_group_describe,
    initialize_share_group_state.API_KEY: _share_state(
        initialize_share_group_state, initialize_share_group_state.InitializeStateResult
    ),
    read_share_group_state.API_KEY: _share_state(
        read_share_group_state, read_share_group_state.ReadStateResult
    ),
    write_share_group_state.API_KEY: _share_state(
        write_share_group_state, write_share_group_state.WriteStateResult
    ),
    delete_share_group_state.API_KEY: _share_state(
        delete_share_group_state, delete_share_group_state.DeleteStateResult
    ),
    read_share_group_state_summary.API_KEY: _share_state(
        read_share_group_state_summary, read_share_group_state_summary.ReadStateSummaryResult
    ),
}

# The APIs the group coordinator answers: the ones the SASL gate answers in their own shape.
COORDINATOR_KEYS = frozenset(
    (
        offset_commit.API_KEY,
        txn_offset_commit.API_KEY,
        offset_fetch.API_KEY,
        join_group.API_KEY,
        sync_group.API_KEY,
        heartbeat.API_KEY,
        leave_group.API_KEY,
        offset_delete.API_KEY,
        describe_groups.API_KEY,
        list_groups.API_KEY,
        delete_groups.API_KEY,
        consumer_group_heartbeat.API_KEY,
        consumer_group_describe.API_KEY,
        streams_group_heartbeat.API_KEY,
        streams_group_describe.API_KEY,
        streams_group_topology_description_update.API_KEY,
        describe_group_history.API_KEY,
        share_group_heartbeat.API_KEY,
        share_group_describe.API_KEY,
    )
)
