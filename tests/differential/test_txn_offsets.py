"""Transactional offsets, Kafka vs kgc: TxnOffsetCommit before and after AddOffsetsToTxn (the
coordinator's verification and its translations per version), with a stale epoch, with a
generation the group does not have, metadata too large; OffsetFetch with and without
``require_stable`` while the transaction is open, after its COMMIT and after an ABORT.

Producer ids differ between the two servers, so the transaction coordinator's answers are
recorded by error code only (``note``); TxnOffsetCommit and OffsetFetch answers are
compared whole.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.diffkit import Runner, Side

from protocol.errors import ErrorCode
from protocol.messages import (
    add_offsets_to_txn,
    end_txn,
    init_producer_id,
    offset_fetch,
    txn_offset_commit,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

TXN_COMMIT = txn_offset_commit.API_KEY
OFFSET_FETCH = offset_fetch.API_KEY


def _txn_commit(
    tid: str,
    group: str,
    pid: int,
    epoch: int,
    offsets: dict[str, dict[int, int]],
    *,
    generation: int = -1,
    member_id: str = "",
    metadata: str = "",
) -> txn_offset_commit.TxnOffsetCommitRequest:
    return txn_offset_commit.TxnOffsetCommitRequest(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member_id,
        topics=[
            txn_offset_commit.TxnOffsetCommitRequestTopic(
                t,
                [
                    txn_offset_commit.TxnOffsetCommitRequestPartition(
                        p, o, committed_metadata=metadata
                    )
                    for p, o in parts.items()
                ],
            )
            for t, parts in offsets.items()
        ],
    )


def _fetch(group: str, topic: str, stable: bool) -> offset_fetch.OffsetFetchRequest:
    return offset_fetch.OffsetFetchRequest(
        group_id=group,
        topics=[offset_fetch.OffsetFetchRequestTopic(topic, [0, 1])],
        require_stable=stable,
    )


def _setup_call(side: Side, api: Any, version: int, body: Any, step: str) -> Any:
    """A transaction coordinator call: compared by its error code only. Retried while the
    previous transaction completes (CONCURRENT_TRANSACTIONS until its markers are written
    and Complete* is durable), as clients retry it."""
    deadline = time.monotonic() + side.timeout
    while True:
        resp = side.untimed().call(api.API_KEY, version, body)
        if resp.error_code != ErrorCode.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
            side.note(step, api.API_KEY, version, int(resp.error_code))
            return resp
        time.sleep(0.05)


def _init_producer(side: Side, tid: str) -> Any:
    """InitProducerId, retried while the coordinator loads (Kafka creates and loads
    __transaction_state on the first FindCoordinator); its final code is compared."""
    req = init_producer_id.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000)
    deadline = time.monotonic() + side.timeout
    while True:
        resp = side.untimed().call(init_producer_id.API_KEY, 4, req)
        if resp.error_code not in _LOADING or time.monotonic() > deadline:
            side.note("init", init_producer_id.API_KEY, 4, int(resp.error_code))
            return resp
        time.sleep(0.1)


_LOADING = (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
)


def _wait_stable(side: Side, group: str, topic: str) -> None:
    """Until the markers reached the offsets partition (they follow EndTxn's answer)."""
    deadline = time.monotonic() + side.timeout
    while time.monotonic() < deadline:
        resp = side.untimed().call(OFFSET_FETCH, 7, _fetch(group, topic, True))
        if all(p.error_code == 0 for p in resp.topics[0].partitions):
            return
        time.sleep(0.05)
    raise AssertionError(f"{side.label}: offsets of {group} still unstable")


def txn_offsets(side: Side) -> None:
    topic = side.name("txo-t")
    group = side.name("txo-g")
    tid = side.name("txo-tx")
    side.create_topic(topic, 2)
    side.wait_coordinator(group)
    side.wait_coordinator(tid, key_type=1)
    init = _init_producer(side, tid)
    pid, epoch = init.producer_id, init.producer_epoch
    # Before AddOffsetsToTxn: the coordinator does not know the partition (v3: INVALID_TXN_STATE,
    # v4: TRANSACTION_ABORTABLE), a stale epoch is fenced (INVALID_PRODUCER_EPOCH).
    for v in (2, 3, 4):
        side.call(
            TXN_COMMIT,
            v,
            _txn_commit(tid, group, pid, epoch, {topic: {0: 1}}),
            step=f"unadded_v{v}",
        )
    side.call(
        TXN_COMMIT, 3, _txn_commit(tid, group, pid, epoch + 1, {topic: {0: 1}}), step="other_epoch"
    )
    _setup_call(
        side,
        add_offsets_to_txn,
        3,
        add_offsets_to_txn.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        ),
        "add_offsets",
    )
    side.call(
        TXN_COMMIT,
        3,
        _txn_commit(tid, group, pid, epoch, {topic: {0: 5, 1: 6, 7: 1}}),
        step="commit",
    )
    side.call(
        TXN_COMMIT,
        3,
        _txn_commit(tid, group, pid, epoch, {topic: {0: 5}}, generation=4, member_id="m"),
        step="illegal_generation",
    )
    side.call(
        TXN_COMMIT,
        3,
        _txn_commit(tid, group, pid, epoch, {topic: {1: 6}}, metadata="m" * 5000),
        step="metadata_too_large",
    )
    side.call(OFFSET_FETCH, 7, _fetch(group, topic, True), step="open_stable")
    side.call(OFFSET_FETCH, 7, _fetch(group, topic, False), step="open_plain")
    _setup_call(
        side,
        end_txn,
        3,
        end_txn.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        ),
        "commit_txn",
    )
    _wait_stable(side, group, topic)
    side.call(OFFSET_FETCH, 7, _fetch(group, topic, True), step="committed")
    # A second transaction, aborted: the committed offsets stay.
    _setup_call(
        side,
        add_offsets_to_txn,
        3,
        add_offsets_to_txn.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        ),
        "add_offsets_2",
    )
    side.call(TXN_COMMIT, 3, _txn_commit(tid, group, pid, epoch, {topic: {0: 50}}), step="commit_2")
    side.call(OFFSET_FETCH, 7, _fetch(group, topic, True), step="open_stable_2")
    _setup_call(
        side,
        end_txn,
        3,
        end_txn.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=False
        ),
        "abort_txn",
    )
    _wait_stable(side, group, topic)
    side.call(OFFSET_FETCH, 7, _fetch(group, topic, True), step="aborted")


def test_txn_offsets(diff: Runner) -> None:
    diff(txn_offsets)
