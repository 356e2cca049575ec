"""The pure transaction coordinator against Kafka's TransactionCoordinatorTest and friends.

Each test is named after the item of the notes' checklist (transactions-semantics.md 9.1)
and the Kafka test it ports; time is the context's fake clock and the log is in memory.
"""

from __future__ import annotations

import pytest
from support.txn_context import TxnContext

from coordinator.txn.coordinator import TxnConfig, TxnOutcome, WriteKind
from coordinator.txn.metadata import TxnTransit
from coordinator.txn.records import (
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from coordinator.txn.state import IllegalTransactionTransition, TransactionState, check_transition
from protocol.errors import ErrorCode
from storage.records.offsets import partition_for

E = ErrorCode
S = TransactionState
TP = ("foo", 0)
TP2 = ("bar", 1)


def ongoing(ctx: TxnContext, txn_id: str = "t") -> TxnOutcome:
    init = ctx.init(txn_id)
    assert ctx.add(txn_id, init.producer_id, init.producer_epoch, [TP]).error is E.NO_ERROR
    return init


# -- InitProducerId


def test_item1_should_return_invalid_request_when_transactional_id_is_empty() -> None:
    ctx = TxnContext()
    assert ctx.init("").error is E.INVALID_REQUEST
    assert ctx.writes == []


def test_item1_invalid_transaction_timeout() -> None:
    ctx = TxnContext(TxnConfig(transaction_max_timeout_ms=1000))
    assert ctx.init("t", timeout_ms=1001).error is E.INVALID_TRANSACTION_TIMEOUT
    assert ctx.init("t", timeout_ms=0).error is E.INVALID_TRANSACTION_TIMEOUT
    assert ctx.init("t", timeout_ms=1000).error is E.NO_ERROR


def test_item2_should_init_pid_with_epoch_zero_for_new_transactional_id() -> None:
    ctx = TxnContext(first_pid=77)
    r = ctx.init("t")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, 77, 0)
    md = ctx.md("t")
    assert md.state is S.EMPTY and md.txn_start_timestamp == -1
    assert len(ctx.writes) == 1 and ctx.writes[0].kind is WriteKind.INIT


def test_item3_should_generate_new_producer_id_if_epochs_exhausted() -> None:
    ctx = TxnContext(first_pid=10)
    ctx.init("t")
    ctx.md("t").producer_epoch = 32766  # exhausted: Short.MaxValue - 1
    r = ctx.init("t")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, 11, 0)
    assert ctx.md("t").prev_producer_id == 10


def test_item4_coordinator_load_in_progress_and_not_coordinator_on_init_pid() -> None:
    ctx = TxnContext()
    p = ctx.coord.partition_for("t")
    ctx.coord.begin_load(p, 1)
    assert ctx.init("t").error is E.COORDINATOR_LOAD_IN_PROGRESS
    ctx.coord.unload_partition(p)
    assert ctx.init("t").error is E.NOT_COORDINATOR


def test_item5_should_increment_epoch_on_init_pid_when_existing_complete_transaction() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.NO_ERROR
    ctx.deliver()
    assert ctx.md("t").state is S.COMPLETE_COMMIT
    r = ctx.init("t")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, init.producer_id, 1)
    assert ctx.md("t").state is S.EMPTY and ctx.md("t").partitions == set()


def test_item6_should_wait_for_commit_to_complete_on_init_pid_in_prepare_commit() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.end("t", init.producer_id, 0, commit=True)
    assert ctx.md("t").state is S.PREPARE_COMMIT
    assert ctx.init("t").error is E.CONCURRENT_TRANSACTIONS
    ctx.deliver()
    assert ctx.init("t").producer_epoch == 1


def test_item7_should_abort_transaction_on_init_pid_when_existing_transaction_ongoing() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    r = ctx.init("t")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    md = ctx.md("t")
    assert md.state is S.PREPARE_ABORT and md.producer_epoch == 1
    ((_, marker),) = ctx.markers
    assert (marker.commit, marker.producer_epoch, marker.partitions) == (False, 1, (TP,))
    assert ctx.init("t").error is E.CONCURRENT_TRANSACTIONS  # markers still outstanding
    ctx.deliver()
    r = ctx.init("t")
    # The fence and the retry: a new instance ends two epochs up.
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, init.producer_id, 2)
    # The old producer is fenced everywhere.
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.PRODUCER_FENCED


def test_item8_should_not_repeatedly_bump_epoch_due_to_init_pid_during_ongoing_if_append_fails() -> (
    None
):
    ctx = TxnContext()
    ongoing(ctx)
    ctx.fail_writes = E.NOT_COORDINATOR
    for _ in range(3):
        assert ctx.init("t").error is E.NOT_COORDINATOR
        md = ctx.md("t")
        # The fenced epoch stays in memory (epoch 0 is fenced although the log never
        # recorded it), and is not bumped again by the next attempt.
        assert (md.state, md.producer_epoch, md.has_failed_epoch_fence) == (S.ONGOING, 1, True)
        assert md.pending_state is None
    ctx.fail_writes = None
    assert ctx.init("t").error is E.CONCURRENT_TRANSACTIONS
    assert ctx.md("t").producer_epoch == 1
    ctx.deliver()
    assert ctx.init("t").producer_epoch == 2


def test_item9_init_producer_id_stale_current_epoch_provided() -> None:
    ctx = TxnContext()
    a = ctx.init("t")
    b = ctx.init("t")  # a new instance: epoch 1, last epoch forgotten
    assert b.producer_epoch == 1
    assert ctx.init("t", pid=a.producer_id, epoch=0).error is E.PRODUCER_FENCED
    # KIP-360 bump with the current epoch, then its retry returns the same epoch.
    c = ctx.init("t", pid=b.producer_id, epoch=1)
    assert c.producer_epoch == 2
    retry = ctx.init("t", pid=b.producer_id, epoch=1)
    assert (retry.error, retry.producer_epoch) == (E.NO_ERROR, 2)


def test_item9_fence_producer_when_mapping_exists_with_different_producer_id() -> None:
    ctx = TxnContext()
    a = ctx.init("t")
    r = ctx.init("t", pid=a.producer_id + 500, epoch=0)
    assert r.error is E.PRODUCER_FENCED


def test_item9_retry_init_producer_id_after_producer_id_rotation() -> None:
    ctx = TxnContext(first_pid=10)
    a = ctx.init("t")
    ctx.md("t").producer_epoch = 32766
    r = ctx.init("t", pid=a.producer_id, epoch=32766)
    assert (r.producer_id, r.producer_epoch) == (11, 0)
    assert ctx.md("t").last_producer_epoch == 32766
    # The producer never saw the answer and retries with the old pid and exhausted epoch.
    retry = ctx.init("t", pid=a.producer_id, epoch=32766)
    assert (retry.error, retry.producer_id) == (E.NO_ERROR, 11)


# -- AddPartitionsToTxn and verification


def test_item10_invalid_pid_mapping_on_add_partitions_when_transactional_id_not_present() -> None:
    ctx = TxnContext()
    assert ctx.add("t", 1, 0, [TP]).error is E.INVALID_PRODUCER_ID_MAPPING
    a = ctx.init("t")
    assert ctx.add("t", a.producer_id + 1, 0, [TP]).error is E.INVALID_PRODUCER_ID_MAPPING
    assert ctx.add("", a.producer_id, 0, [TP]).error is E.INVALID_REQUEST


def test_item11_concurrent_transactions_on_add_partitions_when_state_is_prepare_commit() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.end("t", init.producer_id, 0, commit=True)
    assert ctx.add("t", init.producer_id, 0, [TP2]).error is E.CONCURRENT_TRANSACTIONS
    assert (
        ctx.coord.add_offsets("t", init.producer_id, 0, "g", ctx.now).error
        is E.CONCURRENT_TRANSACTIONS
    )


def test_item12_producer_fenced_on_add_partitions_when_epochs_are_different() -> None:
    ctx = TxnContext()
    a = ctx.init("t")
    assert ctx.add("t", a.producer_id, 1, [TP]).error is E.PRODUCER_FENCED


def test_item13_errors_none_on_add_partition_when_partitions_the_same_and_no_write() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    writes = len(ctx.writes)
    start = ctx.md("t").txn_start_timestamp
    ctx.sleep(100)
    assert ctx.add("t", init.producer_id, 0, [TP]).error is E.NO_ERROR
    assert len(ctx.writes) == writes and ctx.md("t").txn_start_timestamp == start
    # A new partition is written, and the transaction's clock is not restarted.
    assert ctx.add("t", init.producer_id, 0, [TP2]).error is E.NO_ERROR
    assert len(ctx.writes) == writes + 1 and ctx.md("t").txn_start_timestamp == start
    assert ctx.md("t").partitions == {TP, TP2}


def test_item13_add_offsets_adds_the_groups_offsets_partition() -> None:
    ctx = TxnContext()
    a = ctx.init("t")
    assert (
        ctx.run(ctx.coord.add_offsets("t", a.producer_id, 0, "my-group", ctx.now)).error
        is E.NO_ERROR
    )
    # Kafka: abs("my-group".hashCode) % 50, where the group coordinator keeps the group.
    assert ctx.md("t").partitions == {("__consumer_offsets", partition_for("my-group", 50))}
    assert partition_for("my-group", 50) == 12


def test_item14_verify_partition_handling() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    pid = init.producer_id
    v = ctx.coord.verify
    assert v("t", pid, 0, [TP, TP2]) == {TP: E.NO_ERROR, TP2: E.TRANSACTION_ABORTABLE}
    assert v("t", pid, 1, [TP]) == {TP: E.PRODUCER_FENCED}
    assert v("t", pid + 1, 0, [TP]) == {TP: E.INVALID_PRODUCER_ID_MAPPING}
    assert v("x", pid, 0, [TP]) == {TP: E.INVALID_PRODUCER_ID_MAPPING}
    assert v("", pid, 0, [TP]) == {TP: E.INVALID_REQUEST}
    ctx.end("t", pid, 0, commit=True)
    assert v("t", pid, 0, [TP]) == {TP: E.CONCURRENT_TRANSACTIONS}
    ctx.deliver()
    # The transaction ended: a late produce to its partition is not part of any.
    assert v("t", pid, 0, [TP]) == {TP: E.TRANSACTION_ABORTABLE}


def test_item14_verify_ignores_a_pending_transition() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    pending = ctx.coord.add_partitions("t", init.producer_id, 0, [TP2], ctx.now)
    assert pending.write is not None and ctx.md("t").pending_state is S.ONGOING
    assert ctx.coord.verify("t", init.producer_id, 0, [TP]) == {TP: E.NO_ERROR}
    # The partition joins only once its record is durable.
    assert ctx.coord.verify("t", init.producer_id, 0, [TP2]) == {TP2: E.TRANSACTION_ABORTABLE}


# -- EndTxn and timeouts


def test_item15_producer_fenced_on_end_txn_when_epoch_is_not_same_or_smaller() -> None:
    ctx = TxnContext()
    ctx.init("t")
    init = ctx.init("t")
    ctx.add("t", init.producer_id, 1, [TP])
    assert ctx.end("t", init.producer_id, 2, commit=True).error is E.PRODUCER_FENCED
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.PRODUCER_FENCED
    assert ctx.end("t", init.producer_id + 1, 1, commit=True).error is E.INVALID_PRODUCER_ID_MAPPING


def test_item16_end_txn_when_status_is_complete_commit_and_result_is_commit_in_v1() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.end("t", init.producer_id, 0, commit=True)
    ctx.deliver()
    writes = len(ctx.writes)
    r = ctx.end("t", init.producer_id, 0, commit=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, init.producer_id, 0)
    assert len(ctx.writes) == writes
    assert ctx.end("t", init.producer_id, 0, commit=False).error is E.INVALID_TXN_STATE


def test_item16_end_txn_in_empty_state_is_invalid_txn_state_in_v1() -> None:
    ctx = TxnContext()
    a = ctx.init("t")
    assert ctx.end("t", a.producer_id, 0, commit=False).error is E.INVALID_TXN_STATE
    assert ctx.end("t", a.producer_id, 0, commit=True).error is E.INVALID_TXN_STATE


def test_item18_end_txn_concurrent_in_prepare_commit_and_invalid_in_prepare_abort() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.end("t", init.producer_id, 0, commit=True)
    # While the markers go out the completion is pending: every EndTxn is told to retry.
    assert ctx.end("t", init.producer_id, 0, commit=False).error is E.CONCURRENT_TRANSACTIONS
    # Kafka's tests set the state without a pending completion (as after a failed
    # completion write): then the table of notes 3.3 applies.
    md = ctx.md("t")
    md.pending_state = None
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.CONCURRENT_TRANSACTIONS
    assert ctx.end("t", init.producer_id, 0, commit=False).error is E.INVALID_TXN_STATE
    md.state = S.PREPARE_ABORT
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.INVALID_TXN_STATE
    assert ctx.end("t", init.producer_id, 0, commit=False).error is E.CONCURRENT_TRANSACTIONS


def test_end_txn_replies_after_prepare_is_durable_and_before_markers() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    pending = ctx.coord.end_txn("t", init.producer_id, 0, True, ctx.now)
    assert pending.write is not None and pending.markers is None  # nothing sent yet
    assert ctx.md("t").state is S.ONGOING  # memory changes only with the durable record
    done = ctx.run(pending)
    assert done.error is E.NO_ERROR and done.markers is not None
    assert ctx.md("t").state is S.PREPARE_COMMIT
    assert ctx.md("t").pending_state is S.COMPLETE_COMMIT


def test_item20_should_abort_expired_transactions_in_ongoing_state_and_bump_epoch() -> None:
    ctx = TxnContext()
    init = ctx.init("t", timeout_ms=5000)
    ctx.add("t", init.producer_id, 0, [TP])
    ctx.sleep(5000)
    assert ctx.coord.timed_out_transactions(ctx.now) == []  # not past yet: start + timeout < now
    ctx.sleep(1)
    (o,) = ctx.coord.timed_out_transactions(ctx.now)
    assert o.write is not None and o.write.kind is WriteKind.TIMEOUT
    ctx.run(o)
    md = ctx.md("t")
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.PREPARE_ABORT, 1, -1)
    ctx.deliver()
    assert ctx.md("t").state is S.COMPLETE_ABORT
    # The timed-out producer is fenced.
    assert ctx.add("t", init.producer_id, 0, [TP]).error is E.PRODUCER_FENCED
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.PRODUCER_FENCED


def test_item20_should_not_abort_expired_transactions_that_have_a_pending_state_transition() -> (
    None
):
    ctx = TxnContext()
    init = ctx.init("t", timeout_ms=5000)
    ctx.add("t", init.producer_id, 0, [TP])
    pending = ctx.coord.add_partitions("t", init.producer_id, 0, [TP2], ctx.now)
    assert pending.write is not None
    ctx.sleep(10_000)
    assert ctx.coord.timed_out_transactions(ctx.now) == []


# -- state manager, record format


def test_item22_should_write_txn_markers_for_transaction_in_prepared_commit_state_after_load() -> (
    None
):
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.end("t", init.producer_id, 0, commit=True)
    fresh, markers = ctx.replayed(coordinator_epoch=3)
    (m,) = markers
    assert (m.commit, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.partitions) == (
        True,
        init.producer_id,
        0,
        3,
        (TP,),
    )
    md = fresh.metadata("t")
    assert md is not None and md.state is S.PREPARE_COMMIT
    assert md.pending_state is S.COMPLETE_COMMIT  # blocked until Complete* is durable
    assert fresh.init_producer_id("t", 1000, -1, -1, ctx.now).error is E.CONCURRENT_TRANSACTIONS
    assert fresh.marker_partition_done("t", m, TP)
    w = fresh.markers_done("t", m)
    assert w is not None and fresh.written(w, E.NO_ERROR, ctx.now).error is E.NO_ERROR
    assert md.state is S.COMPLETE_COMMIT and md.pending_state is None
    # The old owner's markers no longer complete anything there.
    assert not fresh.marker_partition_done("t", ctx.markers[0][1], TP)


def test_item23_append_fail_to_coordinator_not_available_and_pending_state_kept_on_retry() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.fail_writes = E.COORDINATOR_NOT_AVAILABLE
    assert ctx.end("t", init.producer_id, 0, commit=True).error is E.COORDINATOR_NOT_AVAILABLE
    assert ctx.md("t").state is S.ONGOING and ctx.md("t").pending_state is None
    ctx.fail_writes = None
    ctx.end("t", init.producer_id, 0, commit=True)
    ((txn_id, marker),) = ctx.markers
    assert ctx.coord.marker_partition_done(txn_id, marker, TP)
    w = ctx.coord.markers_done(txn_id, marker)
    assert w is not None
    retry = ctx.coord.written(w, E.COORDINATOR_NOT_AVAILABLE, ctx.now)
    # The completion is retried: the id stays blocked.
    assert retry.write is w and ctx.md("t").pending_state is S.COMPLETE_COMMIT
    assert ctx.coord.written(w, E.NO_ERROR, ctx.now).error is E.NO_ERROR
    assert ctx.md("t").state is S.COMPLETE_COMMIT


def test_item24_should_remove_complete_commit_expired_transactional_ids_not_ongoing() -> None:
    ctx = TxnContext(TxnConfig(transactional_id_expiration_ms=1000))
    init = ongoing(ctx, "done")
    ctx.end("done", init.producer_id, 0, commit=True)
    ctx.deliver()
    ongoing(ctx, "open")
    ctx.sleep(999)
    assert ctx.coord.expired_transactional_ids(ctx.now) == []
    ctx.sleep(1)
    (w,) = ctx.coord.expired_transactional_ids(ctx.now)
    assert w.transactional_id == "done" and w.value is None
    assert ctx.coord.describe("done")[0] is E.TRANSACTIONAL_ID_NOT_FOUND  # expiring
    ctx.run(TxnOutcome(write=w))
    assert ctx.coord.metadata("done") is None and ctx.coord.metadata("open") is not None
    fresh, _ = ctx.replayed()
    assert fresh.metadata("done") is None
    # The expired id starts over with a new producer id.
    assert ctx.init("done").producer_id != init.producer_id


def test_item25_list_transactions_filtering_and_loading() -> None:
    ctx = TxnContext()
    a = ongoing(ctx, "a")
    b = ctx.init("b")
    ctx.sleep(500)
    err, unknown, mds = ctx.coord.list_transactions(["Ongoing", "Bogus"], [], -1, None, ctx.now)
    assert (err, unknown, [m.transactional_id for m in mds]) == (E.NO_ERROR, ["Bogus"], ["a"])
    _, _, mds = ctx.coord.list_transactions([], [b.producer_id], -1, None, ctx.now)
    assert [m.transactional_id for m in mds] == ["b"]
    _, _, mds = ctx.coord.list_transactions(["Ongoing"], [], 400, None, ctx.now)
    assert [m.transactional_id for m in mds] == ["a"]
    _, _, mds = ctx.coord.list_transactions(["Ongoing"], [], 500, None, ctx.now)
    assert mds == []
    _, _, mds = ctx.coord.list_transactions([], [], -1, "a.*", ctx.now)
    assert [m.transactional_id for m in mds] == ["a"]
    assert ctx.coord.list_transactions([], [], -1, "(", ctx.now)[0] is E.INVALID_REGULAR_EXPRESSION
    assert a.producer_id != b.producer_id
    ctx.coord.begin_load(7, 2)
    assert (
        ctx.coord.list_transactions([], [], -1, None, ctx.now)[0] is E.COORDINATOR_LOAD_IN_PROGRESS
    )


def test_item21_describe_transactions() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    err, md = ctx.coord.describe("t")
    assert err is E.NO_ERROR and md is not None
    assert (md.state.kafka_name, md.producer_id, md.partitions) == (
        "Ongoing",
        init.producer_id,
        {TP},
    )
    assert ctx.coord.describe("nope")[0] is E.TRANSACTIONAL_ID_NOT_FOUND
    assert ctx.coord.describe("")[0] is E.INVALID_REQUEST


def test_item27_record_round_trip_previous_and_next_producer_ids_and_tombstone() -> None:
    t = TxnTransit(5, 4, 6, 3, -1, 60000, S.PREPARE_COMMIT, frozenset({TP, TP2}), 10, 20, 0)
    back = decode_txn_value(encode_txn_value(t))
    assert back == t
    empty = TxnTransit(5, -1, -1, 0, -1, 1000, S.EMPTY, frozenset(), -1, 7, 0)
    assert decode_txn_value(encode_txn_value(empty)) == empty
    assert decode_txn_key(encode_txn_key("my-txn")) == "my-txn"
    assert decode_txn_key(b"\x00\x05xx") is None  # another record type: skipped on load
    with pytest.raises(ValueError):
        encode_txn_value(TxnTransit(5, -1, -1, 0, -1, 1, S.DEAD, frozenset(), -1, 7, 0))


def test_item27_record_matches_kafkas_bytes() -> None:
    # TransactionLog.valueToBytes (v1) of producerId 1, epoch 2, timeout 3, Ongoing,
    # partitions {foo: [0]}, lastUpdate 4, start 5, no tags.
    t = TxnTransit(1, -1, -1, 2, -1, 3, S.ONGOING, frozenset({TP}), 5, 4, 0)
    expect = (
        b"\x00\x01"
        + (1).to_bytes(8, "big")
        + (2).to_bytes(2, "big")
        + (3).to_bytes(4, "big")
        + b"\x01"
        + b"\x02"  # compact array of 1
        + b"\x04foo"
        + b"\x02"
        + (0).to_bytes(4, "big")
        + b"\x00"
        + (4).to_bytes(8, "big")
        + (5).to_bytes(8, "big")
        + b"\x00"
    )
    assert encode_txn_value(t) == expect
    assert encode_txn_key("ab") == b"\x00\x00\x00\x02ab"


def test_states_follow_kafkas_valid_previous_states() -> None:
    check_transition(S.ONGOING, S.PREPARE_COMMIT)
    with pytest.raises(IllegalTransactionTransition):
        check_transition(S.EMPTY, S.PREPARE_COMMIT)
    with pytest.raises(IllegalTransactionTransition):
        check_transition(S.PREPARE_COMMIT, S.COMPLETE_ABORT)
    assert S.from_kafka_name("PrepareEpochFence") is S.PREPARE_EPOCH_FENCE
    assert [s.kafka_name for s in S][:3] == ["Empty", "Ongoing", "PrepareCommit"]


def test_markers_fenced_leave_the_transaction_in_prepare() -> None:
    ctx = TxnContext()
    init = ongoing(ctx)
    ctx.end("t", init.producer_id, 0, commit=False)
    ctx.deliver(E.NOT_LEADER_FOR_PARTITION)
    assert len(ctx.markers) == 1  # retried
    ctx.deliver(E.TRANSACTION_COORDINATOR_FENCED)
    assert ctx.markers == [] and ctx.md("t").state is S.PREPARE_ABORT
    assert ctx.init("t").error is E.CONCURRENT_TRANSACTIONS


def test_replay_rebuilds_memory() -> None:
    ctx = TxnContext()
    for i in range(20):
        init = ongoing(ctx, f"t{i}")
        if i % 3 == 0:
            ctx.end(f"t{i}", init.producer_id, 0, commit=bool(i % 2))
    ctx.deliver()
    fresh, markers = ctx.replayed()
    assert markers == []
    for i in range(20):
        a, b = ctx.md(f"t{i}"), fresh.metadata(f"t{i}")
        assert b is not None
        assert (a.producer_id, a.producer_epoch, a.state, a.partitions, a.txn_start_timestamp) == (
            b.producer_id,
            b.producer_epoch,
            b.state,
            b.partitions,
            b.txn_start_timestamp,
        )
