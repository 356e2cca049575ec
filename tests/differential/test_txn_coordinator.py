"""The transaction coordinator, Kafka vs kgc, request by request (the TV1 protocol):
InitProducerId with a transactional id (its refusals, epochs, fencing, the error of old
versions), AddPartitionsToTxn (refusals per partition, OPERATION_NOT_ATTEMPTED, the
duplicate add), AddOffsetsToTxn, EndTxn in each state, DescribeTransactions and
ListTransactions.

Each side's transactional ids carry the run's token; producer ids are normalised, and
transaction start times are clock readings.
"""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.difftxnkit import add as _add
from support.difftxnkit import end as _end
from support.difftxnkit import init as _init
from support.difftxnkit import ready as _ready
from support.difftxnkit import settle as _settle

from protocol.messages import (
    add_offsets_to_txn,
    describe_transactions,
    list_transactions,
)

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

ADD_OFFSETS = 25
DESCRIBE_TXNS, LIST_TXNS = 65, 66


def init_producer_id_scenario(side: Side) -> None:
    txn = side.name("init")
    _ready(side, txn)
    _init(side, "", 4, "init.empty_id")
    _init(side, txn, 4, "init.timeout_too_long", transaction_timeout_ms=900_001)
    _init(side, txn, 4, "init.timeout_zero", transaction_timeout_ms=0)
    _init(side, txn, 4, "init.pid_without_epoch", producer_id=5)
    first = _init(side, txn, 4, "init.new_id")
    second = _init(side, txn, 4, "init.new_instance")
    pid = first.producer_id
    # The first instance, fenced, asks with its old epoch: PRODUCER_FENCED from v4 on,
    # INVALID_PRODUCER_EPOCH before.
    _init(side, txn, 4, "init.stale_epoch.v4", producer_id=pid, producer_epoch=0)
    _init(side, txn, 3, "init.stale_epoch.v3", producer_id=pid, producer_epoch=0)
    # KIP-360: a bump with the current epoch, then its retry.
    _init(side, txn, 4, "init.bump", producer_id=pid, producer_epoch=second.producer_epoch)
    _init(side, txn, 4, "init.bump_retry", producer_id=pid, producer_epoch=second.producer_epoch)
    _init(side, txn, 4, "init.other_pid", producer_id=pid + 1000, producer_epoch=0)


def add_partitions_scenario(side: Side) -> None:
    topic = side.name("apt")
    side.create_topic(topic, 2)
    txn = side.name("apt")
    _ready(side, txn)
    _add(side, txn, 1, 0, {topic: [0]}, 3, "add.unknown_id")
    r = _init(side, txn, 4, "add.init")
    pid, epoch = r.producer_id, r.producer_epoch
    _add(side, txn, pid, epoch + 1, {topic: [0]}, 3, "add.wrong_epoch.v3")
    _add(side, txn, pid, epoch + 1, {topic: [0]}, 1, "add.wrong_epoch.v1")
    _add(side, txn, pid + 1, epoch, {topic: [0]}, 3, "add.wrong_pid")
    _add(
        side, txn, pid, epoch, {topic: [0, 9], side.name("nosuch"): [0]}, 3, "add.unknown_partition"
    )
    _add(side, txn, pid, epoch, {topic: [0]}, 3, "add.ok")
    _add(side, txn, pid, epoch, {topic: [0]}, 3, "add.again")
    _add(side, txn, pid, epoch, {topic: [0, 1]}, 0, "add.more.v0")
    side.call(
        ADD_OFFSETS,
        3,
        add_offsets_to_txn.Request(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id=side.name("g")
        ),
        step="add_offsets.ok",
    )
    side.call(
        ADD_OFFSETS,
        1,
        add_offsets_to_txn.Request(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch + 1, group_id="g"
        ),
        step="add_offsets.wrong_epoch.v1",
    )
    _end(side, txn, pid, epoch, False, 3, "add.abort")
    _settle(side, txn, "CompleteAbort")


def end_txn_scenario(side: Side) -> None:
    topic = side.name("end")
    side.create_topic(topic, 1)
    txn = side.name("end")
    _ready(side, txn)
    _end(side, txn, 1, 0, True, 3, "end.unknown_id")
    r = _init(side, txn, 4, "end.init")
    pid, epoch = r.producer_id, r.producer_epoch
    _end(side, txn, pid, epoch, True, 3, "end.empty.commit")
    _end(side, txn, pid, epoch, False, 3, "end.empty.abort")
    _add(side, txn, pid, epoch, {topic: [0]}, 3, "end.add")
    _end(side, txn, pid, epoch + 1, True, 3, "end.wrong_epoch.v3")
    _end(side, txn, pid, epoch + 1, True, 1, "end.wrong_epoch.v1")
    _end(side, txn, pid, epoch, True, 3, "end.commit")
    _settle(side, txn, "CompleteCommit")
    _end(side, txn, pid, epoch, True, 3, "end.commit_retry")
    _end(side, txn, pid, epoch, False, 3, "end.abort_after_commit")
    _add(side, txn, pid, epoch, {topic: [0]}, 3, "end.add2")
    _end(side, txn, pid, epoch, False, 4, "end.abort")
    _settle(side, txn, "CompleteAbort")
    _end(side, txn, pid, epoch, False, 4, "end.abort_retry")
    _end(side, txn, pid, epoch, True, 4, "end.commit_after_abort")


def end_txn_v5_scenario(side: Side) -> None:
    """TV2's EndTxn (v5; the reference broker finalizes transaction.version 2): every end
    bumps the epoch and answers the new one, a retry is known by the epoch before the bump,
    an abort with nothing open bumps too, and v4 still takes the TV1 path."""
    topic = side.name("v5")
    side.create_topic(topic, 1)
    txn = side.name("v5")
    _ready(side, txn)
    r = _init(side, txn, 4, "v5.init")
    pid, e = r.producer_id, r.producer_epoch
    _end(side, txn, pid, e, True, 5, "v5.empty.commit")
    _end(side, txn, pid, e + 1, False, 5, "v5.empty.abort_wrong_epoch")
    _end(side, txn, pid + 1, e, False, 5, "v5.empty.abort_other_pid")
    _end(side, txn, pid, e, False, 5, "v5.empty.abort")  # (pid, e+1)
    _settle(side, txn, "CompleteAbort")
    _end(side, txn, pid, e, False, 5, "v5.abort_retry")
    _end(side, txn, pid, e, True, 5, "v5.abort_retry_as_commit")
    _add(side, txn, pid, e, {topic: [0]}, 3, "v5.add_old_epoch")
    _add(side, txn, pid, e + 1, {topic: [0]}, 3, "v5.add")
    _end(side, txn, pid, e, True, 5, "v5.commit_old_epoch")
    _end(side, txn, pid, e + 1, True, 5, "v5.commit")  # (pid, e+2)
    _settle(side, txn, "CompleteCommit")
    _end(side, txn, pid, e + 1, True, 5, "v5.commit_retry")
    _end(side, txn, pid, e + 1, False, 5, "v5.commit_retry_as_abort")
    _end(side, txn, pid, e + 2, True, 5, "v5.commit_nothing_open")
    _end(side, txn, pid, e + 2, False, 5, "v5.abort_nothing_open")  # (pid, e+3)
    _settle(side, txn, "CompleteAbort")
    _end(side, txn, pid, e + 3, True, 4, "v5.v4_commit_after_abort")
    _end(side, txn, pid, e + 3, False, 4, "v5.v4_abort_after_abort")


def describe_list_scenario(side: Side) -> None:
    topic = side.name("dl")
    side.create_topic(topic, 2)
    txn = side.name("dl")
    _ready(side, txn)
    r = _init(side, txn, 4, "dl.init")
    pid, epoch = r.producer_id, r.producer_epoch
    side.call(
        DESCRIBE_TXNS,
        0,
        describe_transactions.Request(transactional_ids=[txn, side.name("nobody")]),
        step="describe.empty",
    )
    _add(side, txn, pid, epoch, {topic: [1, 0]}, 3, "dl.add")
    d = side.call(
        DESCRIBE_TXNS,
        0,
        describe_transactions.Request(transactional_ids=[txn]),
        step="describe.ongoing",
    )
    # Kafka lists the partitions in its hash set's order: no order to compare.
    for t in d.transaction_states[0].topics:
        t.partitions.sort()
    for v in (0, 1, 2):
        side.call(
            LIST_TXNS,
            v,
            list_transactions.Request(
                state_filters=["Ongoing", "Nonsense"], producer_id_filters=[pid]
            ),
            step=f"list.v{v}",
        )
    side.call(
        LIST_TXNS,
        2,
        list_transactions.Request(
            transactional_id_pattern=txn.replace("-", "."), producer_id_filters=[pid]
        ),
        step="list.pattern",
    )
    _end(side, txn, pid, epoch, True, 3, "dl.commit")
    _settle(side, txn, "CompleteCommit")
    side.call(
        DESCRIBE_TXNS,
        0,
        describe_transactions.Request(transactional_ids=[txn]),
        step="describe.complete",
    )


def test_txn_init_producer_id(diff: Runner) -> None:
    diff(init_producer_id_scenario)


def test_txn_add_partitions(diff: Runner) -> None:
    diff(add_partitions_scenario)


def test_txn_end_txn(diff: Runner) -> None:
    diff(end_txn_scenario)


def test_txn_end_txn_v5(diff: Runner) -> None:
    diff(end_txn_v5_scenario)


def test_txn_describe_list(diff: Runner) -> None:
    diff(describe_list_scenario)
