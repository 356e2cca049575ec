"""The share coordinator's inter-broker APIs, Kafka vs kgc: FindCoordinator key type 2 and
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87), sent raw as a broker's
persister sends them (neither server has an authorizer, so CLUSTER_ACTION is allowed).

On a two-partition topic: the coordinator of ``group:topicId:partition`` found (v6, key
type 2; a key that is not one, and key type 2 below v6), the state initialized (start
offset 10, state epoch 1) and read back, a write at leader epoch 1 with its batches, the
summary, a read and a write at an older leader epoch, a write and an initialize at an older
state epoch, a read of a partition never initialized, an unknown topic id, empty requests,
then the state deleted and read again. Error messages are compared too: kgc's are listed
in known_differences.toml where it differs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.diffkit import Side

from protocol.messages import delete_share_group_state as del_m
from protocol.messages import find_coordinator as fc
from protocol.messages import initialize_share_group_state as init_m
from protocol.messages import metadata
from protocol.messages import read_share_group_state as read_m
from protocol.messages import read_share_group_state_summary as sum_m
from protocol.messages import write_share_group_state as write_m
from storage.interface import kafka_uuid

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

UNKNOWN_TOPIC = bytes(range(1, 17))


def _topic_id(side: Side, topic: str) -> bytes:
    req = metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name=topic)])
    _, resp = side.untimed().request(metadata.API_KEY, req, version=12)
    return bytes(resp.topics[0].topic_id)


def _find(side: Side, key: str, *, step: str, version: int = 6, wait: bool = False) -> Any:
    """FindCoordinator key type 2; ``wait``: until it answers (Kafka creates
    __share_group_state on the first ask and answers COORDINATOR_NOT_AVAILABLE meanwhile)."""
    req = fc.FindCoordinatorRequest(key_type=2, coordinator_keys=[key])
    if version < 4:
        req = fc.FindCoordinatorRequest(key_type=2, key=key)
    if wait:
        deadline = time.monotonic() + side.timeout
        while time.monotonic() < deadline:
            _, resp = side.untimed().request(fc.API_KEY, req, version=version)
            if resp.coordinators[0].error_code == 0:
                break
            time.sleep(0.1)
    return side.call(fc.API_KEY, version, req, step=step)


def _settled(side: Side, group: str, tid: bytes) -> None:
    """Until the state partition answers a read (Kafka loads it after creating the topic)."""
    req = sum_m.Request(
        group_id=group,
        topics=[sum_m.ReadStateSummaryData(topic_id=tid, partitions=[sum_m.PartitionData(0, 0)])],
    )
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        _, resp = side.untimed().request(sum_m.API_KEY, req, version=1)
        if resp.results and resp.results[0].partitions[0].error_code == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{side.label}: the share state of {group} never answered")


def _init(group: str, tid: bytes, parts: list[tuple[int, int, int]]) -> Any:
    return init_m.Request(
        group_id=group,
        topics=[
            init_m.InitializeStateData(
                topic_id=tid, partitions=[init_m.PartitionData(p, e, s) for p, e, s in parts]
            )
        ],
    )


def _read(group: str, tid: bytes, parts: list[tuple[int, int]]) -> Any:
    return read_m.Request(
        group_id=group,
        topics=[
            read_m.ReadStateData(
                topic_id=tid, partitions=[read_m.PartitionData(p, e) for p, e in parts]
            )
        ],
    )


def _summary(group: str, tid: bytes, parts: list[int]) -> Any:
    return sum_m.Request(
        group_id=group,
        topics=[
            sum_m.ReadStateSummaryData(
                topic_id=tid, partitions=[sum_m.PartitionData(p, 0) for p in parts]
            )
        ],
    )


def _write(
    group: str,
    tid: bytes,
    partition: int,
    state_epoch: int,
    leader_epoch: int,
    start: int,
    batches: list[tuple[int, int, int, int]],
    complete: int = -1,
) -> Any:
    return write_m.Request(
        group_id=group,
        topics=[
            write_m.WriteStateData(
                topic_id=tid,
                partitions=[
                    write_m.PartitionData(
                        partition,
                        state_epoch,
                        leader_epoch,
                        start,
                        complete,
                        [write_m.StateBatch(*b) for b in batches],
                    )
                ],
            )
        ],
    )


def _delete(group: str, tid: bytes, parts: list[int]) -> Any:
    return del_m.Request(
        group_id=group,
        topics=[
            del_m.DeleteStateData(topic_id=tid, partitions=[del_m.PartitionData(p) for p in parts])
        ],
    )


def share_state_apis_scenario(side: Side) -> None:
    topic, group = side.name("state"), side.name("state-g")
    side.create_topic(topic, 2)
    tid = _topic_id(side, topic)
    key = f"{group}:{kafka_uuid(tid)}:0"
    found = _find(side, key, step="find.key_type_2", wait=True)
    for c in found.coordinators:  # the key names this side's topic id
        c.key = c.key.replace(kafka_uuid(tid), "<topic-id>")
    _find(side, f"{group}:not-a-uuid", step="find.bad_key")
    _find(side, key, step="find.v3", version=3)
    _settled(side, group, tid)
    side.call(init_m.API_KEY, 0, _init(group, tid, [(0, 1, 10), (1, 1, 0)]), step="initialize")
    side.call(read_m.API_KEY, 0, _read(group, tid, [(0, 0), (1, 0)]), step="read.after_init")
    side.call(sum_m.API_KEY, 1, _summary(group, tid, [0, 1]), step="summary.after_init")
    batches = [(10, 14, 2, 1), (15, 19, 0, 2), (20, 20, 4, 5)]
    side.call(write_m.API_KEY, 1, _write(group, tid, 0, 1, 1, 10, batches, 6), step="write.v1")
    side.call(read_m.API_KEY, 0, _read(group, tid, [(0, 1)]), step="read.after_write")
    side.call(sum_m.API_KEY, 1, _summary(group, tid, [0]), step="summary.after_write")
    side.call(sum_m.API_KEY, 0, _summary(group, tid, [0]), step="summary.v0")
    # An older leader epoch (the partition's previous leader) is fenced.
    side.call(read_m.API_KEY, 0, _read(group, tid, [(0, 0)]), step="read.old_leader_epoch")
    side.call(
        write_m.API_KEY,
        1,
        _write(group, tid, 0, 1, 0, -1, [(21, 21, 2, 1)]),
        step="write.old_leader_epoch",
    )
    # An older state epoch (before the group's latest initialize) is fenced.
    side.call(
        write_m.API_KEY,
        0,
        _write(group, tid, 0, 0, 1, -1, [(21, 21, 2, 1)]),
        step="write.old_state_epoch",
    )
    side.call(init_m.API_KEY, 0, _init(group, tid, [(0, 0, 5)]), step="initialize.old_state_epoch")
    # Never initialized: the group's other key, and a topic that does not exist.
    other = side.name("state-other")
    side.call(read_m.API_KEY, 0, _read(other, tid, [(0, 0)]), step="read.uninitialized")
    side.call(
        write_m.API_KEY,
        1,
        _write(other, tid, 0, 1, 1, 0, [(0, 0, 2, 1)]),
        step="write.uninitialized",
    )
    side.call(sum_m.API_KEY, 1, _summary(other, tid, [0]), step="summary.uninitialized")
    side.call(
        init_m.API_KEY, 0, _init(group, UNKNOWN_TOPIC, [(0, 1, 0)]), step="initialize.unknown_topic"
    )
    side.call(read_m.API_KEY, 0, _read(group, tid, [(5, 0)]), step="read.no_such_partition")
    # Empty requests: Kafka's service answers them with nothing.
    side.call(read_m.API_KEY, 0, read_m.Request(group_id=group, topics=[]), step="read.empty")
    side.call(del_m.API_KEY, 0, del_m.Request(group_id="", topics=[]), step="delete.empty")
    # Deleted: reads see nothing initialized, a second delete succeeds.
    side.call(del_m.API_KEY, 0, _delete(group, tid, [0, 1]), step="delete")
    side.call(sum_m.API_KEY, 1, _summary(group, tid, [0, 1]), step="summary.after_delete")
    side.call(read_m.API_KEY, 0, _read(group, tid, [(0, 2)]), step="read.after_delete")
    side.call(del_m.API_KEY, 0, _delete(group, tid, [0]), step="delete.again")


def test_share_state_apis(diff: Any) -> None:
    outcome = diff(share_state_apis_scenario)
    assert outcome.kafka.exchanges[0].response.coordinators[0].error_code == 0
