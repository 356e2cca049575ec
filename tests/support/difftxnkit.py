"""Transaction coordinator requests of the differential scenarios (the TV1 protocol).

How this works: the coordinator's scenarios and the log's transactional ones drive a
transaction request by request, as librdkafka does: ``init`` (InitProducerId with a
transactional id), ``add`` (AddPartitionsToTxn v3 and below, its results sorted since Kafka
answers from a hash map), ``end`` (EndTxn); each is ``side.call``, timed and compared.
``settle`` waits, untimed and not compared, until DescribeTransactions shows a state (the
markers written); ``ready`` waits until the id's coordinator is named and loaded and the
server hands out producer ids (Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first
block of ids arrives from the controller).
"""

from __future__ import annotations

import time
from typing import Any

from protocol.messages import (
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    init_producer_id,
)
from support.diffkit import Side

INIT, ADD_PARTITIONS, END_TXN, DESCRIBE_TXNS = 22, 24, 26, 65
APT = add_partitions_to_txn


def init(side: Side, txn_id: str, version: int, step: str, **kw: Any) -> Any:
    req = init_producer_id.Request(
        transactional_id=txn_id, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    for k, v in kw.items():
        setattr(req, k, v)
    return side.call(INIT, version, req, step=step)


def add(
    side: Side,
    txn_id: str,
    pid: int,
    epoch: int,
    parts: dict[str, list[int]],
    version: int,
    step: str,
) -> Any:
    req = APT.Request(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            APT.AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=n, partitions=ps)
            for n, ps in parts.items()
        ],
    )
    resp = side.call(ADD_PARTITIONS, version, req, step=step)
    # Kafka answers from a hash map of partitions: no order to compare.
    resp.results_by_topic_v3_and_below.sort(key=lambda t: t.name)
    for t in resp.results_by_topic_v3_and_below:
        t.results_by_partition.sort(key=lambda r: r.partition_index)
    return resp


def end(
    side: Side, txn_id: str, pid: int, epoch: int, commit: bool, version: int, step: str
) -> Any:
    return side.call(
        END_TXN,
        version,
        end_txn.Request(
            transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit
        ),
        step=step,
    )


def state(side: Side, txn_id: str) -> str:
    _, d = side.untimed().request(
        DESCRIBE_TXNS, describe_transactions.Request(transactional_ids=[txn_id])
    )
    return str(d.transaction_states[0].transaction_state)


def settle(side: Side, txn_id: str, want: str) -> None:
    """Wait (untimed, not compared) until the markers are written and ``want`` is reached."""
    deadline = time.monotonic() + side.timeout
    while state(side, txn_id) != want:
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.label}: {txn_id} never reached {want}")
        time.sleep(0.05)


def ready(side: Side, txn_id: str) -> None:
    """Untimed setup: the id's coordinator is named and has loaded its partition (Kafka
    answers NOT_COORDINATOR a moment after naming itself, while it becomes the leader), and
    the server has handed out a producer id already (the normaliser leaves a 0 as it is)."""
    side.wait_coordinator(txn_id, 1)
    deadline = time.monotonic() + side.timeout
    while True:
        _, d = side.untimed().request(
            DESCRIBE_TXNS, describe_transactions.Request(transactional_ids=[txn_id])
        )
        if d.transaction_states[0].error_code in (0, 105):  # TRANSACTIONAL_ID_NOT_FOUND
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.label}: {txn_id}'s coordinator never loaded")
        time.sleep(0.1)
    # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first block of producer ids
    # arrives from the controller.
    while True:
        _, r = side.untimed().request(
            INIT,
            init_producer_id.Request(
                transactional_id=None,
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        if r.error_code == 0:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{side.label}: no producer id: {r.error_code}")
        time.sleep(0.1)
