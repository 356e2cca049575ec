"""The transaction coordinator's TV2 (KIP-890 part 2) EndTxn, with a fake clock and log.

Kafka's ``endTransaction`` for EndTxn v5 and for the aborts it starts itself once
``transaction.version`` 2 is finalized: every end bumps the epoch (the markers and the
answer carry the new one), a retry is known by its epoch (one below the current one, or
the last of the previous producer id after a rotation), an abort with nothing open is
allowed and bumps too, and an exhausted epoch rotates to the next producer id at the
Complete record. Named after Kafka's TransactionCoordinatorTest where it has the case.
"""

from __future__ import annotations

from support.txn_context import TxnContext

from coordinator.txn.coordinator import TxnConfig, TxnOutcome, WriteKind
from coordinator.txn.records import decode_txn_value
from coordinator.txn.state import TransactionState
from protocol.errors import ErrorCode

E = ErrorCode
S = TransactionState
TP = ("foo", 0)


def end_v2(ctx: TxnContext, pid: int, epoch: int, commit: bool) -> TxnOutcome:
    return ctx.run(ctx.coord.end_txn("t", pid, epoch, commit, ctx.now, tv2=True))


def ongoing_v2(ctx: TxnContext) -> TxnOutcome:
    """InitProducerId, then the partition leader's add (AddPartitionsToTxn v5)."""
    init = ctx.init("t")
    add = ctx.coord.add_partitions("t", init.producer_id, init.producer_epoch, [TP], ctx.now, 2)
    assert ctx.run(add).error is E.NO_ERROR
    return init


def test_end_txn_v2_commit_bumps_the_epoch_of_the_markers_and_the_answer() -> None:
    ctx = TxnContext()
    init = ongoing_v2(ctx)
    assert (
        decode_txn_value(ctx.log[ctx.writes[-1].partition][-1][1] or b"").client_transaction_version
        == 2
    )
    done = end_v2(ctx, init.producer_id, 0, commit=True)
    assert (done.error, done.producer_id, done.producer_epoch) == (E.NO_ERROR, init.producer_id, 1)
    md = ctx.md("t")
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.PREPARE_COMMIT, 1, 0)
    ((_, marker),) = ctx.markers
    assert (marker.producer_epoch, marker.commit, marker.partitions) == (1, True, (TP,))
    ctx.deliver()
    assert (md.state, md.producer_epoch, md.client_transaction_version) == (S.COMPLETE_COMMIT, 1, 2)
    # The next transaction runs at the bumped epoch; the old one is fenced.
    assert ctx.add("t", init.producer_id, 0, [TP]).error is E.PRODUCER_FENCED
    assert ctx.add("t", init.producer_id, 1, [TP]).error is E.NO_ERROR
    # The log rebuilds the same identity.
    fresh, _ = ctx.replayed()
    again = fresh.metadata("t")
    assert again is not None and (again.producer_epoch, again.state) == (1, S.ONGOING)


def test_end_txn_request_when_status_is_complete_commit_and_result_is_commit_in_v2() -> None:
    ctx = TxnContext()
    init = ongoing_v2(ctx)
    end_v2(ctx, init.producer_id, 0, commit=True)
    ctx.deliver()
    writes = len(ctx.writes)
    # A retry (the epoch before the bump): NONE with the current identity, nothing written.
    r = end_v2(ctx, init.producer_id, 0, commit=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, init.producer_id, 1)
    assert len(ctx.writes) == writes
    # The retry of the other result, and a commit at the current epoch with nothing open.
    assert end_v2(ctx, init.producer_id, 0, commit=False).error is E.INVALID_TXN_STATE
    assert end_v2(ctx, init.producer_id, 1, commit=True).error is E.INVALID_TXN_STATE
    # Any other epoch is fenced.
    assert end_v2(ctx, init.producer_id, 2, commit=True).error is E.PRODUCER_FENCED
    bad = end_v2(ctx, init.producer_id + 7, 1, commit=True)
    assert (bad.error, bad.producer_id, bad.producer_epoch) == (
        E.INVALID_PRODUCER_ID_MAPPING,
        -1,
        -1,
    )


def test_end_txn_request_when_status_is_complete_commit_and_result_is_abort_in_v2() -> None:
    """The empty abort: from CompleteCommit at the current epoch, PrepareAbort at epoch+1
    with no partitions, whose CompleteAbort follows at once."""
    ctx = TxnContext()
    init = ongoing_v2(ctx)
    end_v2(ctx, init.producer_id, 0, commit=True)
    ctx.deliver()
    r = end_v2(ctx, init.producer_id, 1, commit=False)
    assert (r.error, r.producer_epoch) == (E.NO_ERROR, 2)
    md = ctx.md("t")
    assert (md.state, md.partitions, md.producer_epoch) == (S.PREPARE_ABORT, set(), 2)
    assert md.txn_start_timestamp == ctx.now
    ((_, marker),) = ctx.markers
    assert marker.partitions == ()
    ctx.deliver()
    assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, 2)
    # Its retry is NONE; a commit is not.
    assert end_v2(ctx, init.producer_id, 1, commit=False).error is E.NO_ERROR
    assert end_v2(ctx, init.producer_id, 1, commit=True).error is E.INVALID_TXN_STATE


def test_end_txn_v2_in_empty_state() -> None:
    ctx = TxnContext()
    init = ctx.init("t")
    assert end_v2(ctx, init.producer_id, 0, commit=True).error is E.INVALID_TXN_STATE
    ctx.init("t")  # epoch 1: epoch 0 is neither current nor a retry here
    assert end_v2(ctx, init.producer_id, 0, commit=False).error is E.PRODUCER_FENCED
    r = end_v2(ctx, init.producer_id, 1, commit=False)
    assert (r.error, r.producer_epoch) == (E.NO_ERROR, 2)
    assert ctx.md("t").state is S.PREPARE_ABORT


def test_end_txn_v2_in_prepare_states_only_a_retry_passes_the_epoch_check() -> None:
    ctx = TxnContext()
    init = ongoing_v2(ctx)
    end_v2(ctx, init.producer_id, 0, commit=True)
    # While the markers go out the completion is pending: CONCURRENT_TRANSACTIONS, checked
    # before the producer id and the epoch.
    assert end_v2(ctx, init.producer_id + 9, 5, commit=True).error is E.CONCURRENT_TRANSACTIONS
    md = ctx.md("t")
    md.pending_state = None  # as after a failed completion write (Kafka's tests' setup)
    assert end_v2(ctx, init.producer_id, 0, commit=True).error is E.CONCURRENT_TRANSACTIONS
    assert end_v2(ctx, init.producer_id, 0, commit=False).error is E.INVALID_TXN_STATE
    assert end_v2(ctx, init.producer_id, 1, commit=True).error is E.PRODUCER_FENCED
    md.state = S.PREPARE_ABORT
    assert end_v2(ctx, init.producer_id, 0, commit=False).error is E.CONCURRENT_TRANSACTIONS
    assert end_v2(ctx, init.producer_id, 0, commit=True).error is E.INVALID_TXN_STATE


def test_end_txn_v2_with_an_exhausted_epoch_rotates_the_producer_id() -> None:
    ctx = TxnContext()
    init = ongoing_v2(ctx)
    md = ctx.md("t")
    md.producer_epoch = 32766  # exhausted: the bump would reach Short.MaxValue
    r = end_v2(ctx, init.producer_id, 32766, commit=True)
    new_pid = md.next_producer_id
    assert new_pid not in (-1, init.producer_id)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NO_ERROR, new_pid, 0)
    ((_, marker),) = ctx.markers
    assert (marker.producer_id, marker.producer_epoch) == (init.producer_id, 32767)
    ctx.deliver()
    assert (md.producer_id, md.producer_epoch, md.prev_producer_id) == (
        new_pid,
        0,
        init.producer_id,
    )
    assert md.next_producer_id == -1
    # The retry from the old producer id (retryOnOverflow) is NONE with the new identity.
    retry = end_v2(ctx, init.producer_id, 32766, commit=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NO_ERROR, new_pid, 0)
    # The rotation survives a reload.
    fresh, _ = ctx.replayed()
    again = fresh.metadata("t")
    assert again is not None
    assert (again.producer_id, again.producer_epoch, again.prev_producer_id) == (
        new_pid,
        0,
        init.producer_id,
    )


def test_abort_expired_transactions_in_ongoing_state_and_bump_epoch_in_v2() -> None:
    """At transaction.version 2 the timeout abort bumps once (markers at e+1, last epoch e):
    the timed-out producer's EndTxn v5 commit then reads as a retry of another result."""
    ctx = TxnContext(TxnConfig(transaction_version=2))
    init = ctx.init("t", timeout_ms=5000)
    ctx.run(ctx.coord.add_partitions("t", init.producer_id, 0, [TP], ctx.now, 2))
    ctx.sleep(5001)
    (o,) = ctx.coord.timed_out_transactions(ctx.now)
    assert o.write is not None and o.write.kind is WriteKind.TIMEOUT
    ctx.run(o)
    md = ctx.md("t")
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.PREPARE_ABORT, 1, 0)
    ((_, marker),) = ctx.markers
    assert (marker.producer_epoch, marker.commit) == (1, False)
    ctx.deliver()
    assert end_v2(ctx, init.producer_id, 0, commit=True).error is E.INVALID_TXN_STATE
    assert ctx.add("t", init.producer_id, 0, [TP]).error is E.PRODUCER_FENCED


def test_init_producer_id_while_ongoing_fences_and_aborts_once_in_v2() -> None:
    ctx = TxnContext(TxnConfig(transaction_version=2))
    init = ongoing_v2(ctx)
    assert ctx.init("t").error is E.CONCURRENT_TRANSACTIONS
    ((_, marker),) = ctx.markers
    assert (marker.producer_epoch, marker.commit) == (1, False)
    ctx.deliver()
    again = ctx.init("t")
    assert (again.error, again.producer_id, again.producer_epoch) == (
        E.NO_ERROR,
        init.producer_id,
        2,
    )


def test_tv2_allows_epoch_re_bumping_after_failed_write() -> None:
    ctx = TxnContext(TxnConfig(transaction_version=2))
    init = ctx.init("t", timeout_ms=5000)
    ctx.run(ctx.coord.add_partitions("t", init.producer_id, 0, [TP], ctx.now, 2))
    ctx.sleep(5001)
    ctx.fail_writes = E.NOT_COORDINATOR
    (o,) = ctx.coord.timed_out_transactions(ctx.now)
    assert ctx.run(o).error is E.NOT_COORDINATOR
    md = ctx.md("t")
    assert (md.state, md.producer_epoch, md.pending_state) == (S.ONGOING, 0, None)
    ctx.fail_writes = None
    (o,) = ctx.coord.timed_out_transactions(ctx.now)
    ctx.run(o)
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.PREPARE_ABORT, 1, 0)
