"""The share partition's in-flight window with a fake clock: Kafka's SharePartitionTest
cases (acquisition, locks, acknowledgements, the delivery limit, member release, SPSO) and
a hypothesis model of the invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share.partition import (
    ACCEPT,
    ACQUIRED,
    GAP,
    REJECT,
    RELEASE,
    SharePartition,
)
from coordinator.share.persister import ACKNOWLEDGED, ARCHIVED, AVAILABLE, PersisterBatch
from protocol.errors import ErrorCode

B = PersisterBatch
LOCK = 30000


def batches(*spans: tuple[int, int]) -> list[tuple[int, int]]:
    return list(spans)


def ack(sp: SharePartition, member: str, *bs: tuple[int, int, list[int]]) -> ErrorCode:
    err, changes = sp.acknowledge(member, list(bs))
    if err == ErrorCode.NO_ERROR:
        sp.commit(changes)
    return err


def test_acquire_whole_batches_count_one_and_window() -> None:
    sp = SharePartition(0)
    got = sp.acquire("m1", batches((0, 4), (5, 9)), 500, 500, 0, LOCK)
    assert got == [(0, 9, 1)]
    assert (sp.start_offset, sp.next_offset) == (0, 10)
    assert sp.fetch_offset() == 10


def test_max_records_is_soft_and_batch_size_splits_ranges() -> None:
    # testAcquireWithMaxFetchRecords / testAcquireWithBatchSizeAndMultipleBatches
    sp = SharePartition(0)
    got = sp.acquire("m1", batches((0, 4), (5, 9), (10, 14)), 7, 500, 0, LOCK)
    assert got == [(0, 9, 1)]  # the batch holding the 7th record is taken whole
    sp = SharePartition(0)
    got = sp.acquire("m1", batches((0, 4), (5, 9), (10, 14), (15, 19)), 500, 10, 0, LOCK)
    assert got == [(0, 9, 1), (10, 19, 1)]


def test_in_flight_limit_stops_new_records() -> None:
    sp = SharePartition(0, max_in_flight=10)
    assert sp.acquire("m1", batches((0, 9), (10, 19)), 500, 500, 0, LOCK) == [(0, 9, 1)]
    assert not sp.can_acquire()
    assert ack(sp, "m1", (0, 0, [RELEASE])) == ErrorCode.NO_ERROR
    assert sp.can_acquire()  # the released record inside the window
    assert sp.acquire("m2", batches((0, 9), (10, 19)), 500, 500, 0, LOCK) == [(0, 0, 2)]


def test_released_record_comes_back_with_count_plus_one() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    assert (
        ack(sp, "m1", (0, 1, [ACCEPT]), (2, 2, [RELEASE]), (3, 4, [ACCEPT])) == ErrorCode.NO_ERROR
    )
    assert sp.start_offset == 2 and sp.fetch_offset() == 2
    assert sp.acquire("m2", batches((0, 4)), 500, 500, 0, LOCK) == [(2, 2, 2)]


def test_lock_timeout_releases_and_late_ack_fails() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    assert sp.next_deadline() == LOCK
    assert sp.expire(LOCK - 1) == []
    assert sp.expire(LOCK) == [B(0, 4, AVAILABLE, 1)]
    assert ack(sp, "m1", (0, 4, [ACCEPT])) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("m2", batches((0, 4)), 500, 500, LOCK, LOCK) == [(0, 4, 2)]


def test_ack_ownership_and_all_or_nothing() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    sp.acquire("m2", batches((5, 9)), 500, 500, 0, LOCK)
    # one bad offset: nothing of the request applies
    assert ack(sp, "m1", (0, 1, [ACCEPT]), (5, 5, [ACCEPT])) == ErrorCode.INVALID_RECORD_STATE
    assert all(sp.records[o].state == ACQUIRED for o in range(10))
    assert ack(sp, "m1", (0, 12, [ACCEPT])) == ErrorCode.INVALID_REQUEST  # past the window
    assert ack(sp, "m1", (0, 4, [ACCEPT])) == ErrorCode.NO_ERROR
    assert ack(sp, "m1", (0, 4, [ACCEPT])) == ErrorCode.NO_ERROR  # below SPSO: ignored
    assert sp.start_offset == 5


def test_per_offset_and_gap_acknowledgements() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    err, changes = sp.acknowledge("m1", [(0, 4, [ACCEPT, GAP, REJECT, RELEASE, ACCEPT])])
    assert err == ErrorCode.NO_ERROR
    assert changes == [
        B(0, 0, ACKNOWLEDGED, 1),
        B(1, 2, ARCHIVED, 1),
        B(3, 3, AVAILABLE, 1),
        B(4, 4, ACKNOWLEDGED, 1),
    ]
    # pending until durable: neither acquirable nor acknowledgeable
    assert sp.acquire("m2", batches((0, 4)), 500, 500, 0, LOCK) == []
    assert ack(sp, "m1", (3, 3, [ACCEPT])) == ErrorCode.INVALID_RECORD_STATE
    sp.commit(changes)
    assert sp.start_offset == 3
    assert sp.acquire("m2", batches((0, 4)), 500, 500, 0, LOCK) == [(3, 3, 2)]


def test_failed_write_rolls_back_to_acquired() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    err, changes = sp.acknowledge("m1", [(0, 4, [ACCEPT])])
    assert err == ErrorCode.NO_ERROR
    assert sp.rollback(changes) == []
    assert ack(sp, "m1", (0, 4, [ACCEPT])) == ErrorCode.NO_ERROR
    # a lock that ran out during the write: the rollback releases as the timeout would
    sp.acquire("m1", batches((5, 9)), 500, 500, 0, LOCK)
    err, changes = sp.acknowledge("m1", [(5, 9, [ACCEPT])])
    assert sp.expire(LOCK) == []
    assert sp.rollback(changes) == [B(5, 9, AVAILABLE, 1)]


def test_delivery_limit_archives() -> None:
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("m1", batches((0, 0)), 500, 500, 0, LOCK)
    assert ack(sp, "m1", (0, 0, [RELEASE])) == ErrorCode.NO_ERROR
    assert sp.acquire("m1", batches((0, 0)), 500, 500, 0, LOCK) == [(0, 0, 2)]
    assert ack(sp, "m1", (0, 0, [RELEASE])) == ErrorCode.NO_ERROR
    assert sp.start_offset == 1  # archived, never delivered again
    assert sp.acquire("m1", batches((0, 0)), 500, 500, 0, LOCK) == []
    # a lock timeout at the limit archives too
    sp.acquire("m1", batches((1, 1)), 500, 500, 0, LOCK)
    sp.expire(LOCK)
    sp.acquire("m1", batches((1, 1)), 500, 500, LOCK, LOCK)
    assert sp.expire(2 * LOCK) == [B(1, 1, ARCHIVED, 2)]
    assert sp.start_offset == 2


def test_release_member_keeps_the_count() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    sp.acquire("m2", batches((5, 9)), 500, 500, 0, LOCK)
    assert sp.release_member("m1") == [B(0, 4, AVAILABLE, 1)]
    assert sp.acquire("m2", batches((0, 4)), 500, 500, 0, LOCK) == [(0, 4, 2)]
    assert sp.held_by("m2") == 10


def test_load_with_gap_window_and_terminal_prefix() -> None:
    # testMaybeInitializeStateBatchesWithGapAtBeginning: holes are never-delivered records
    sp = SharePartition(
        10, [B(10, 12, ACKNOWLEDGED, 1), B(15, 17, AVAILABLE, 2), B(18, 19, ARCHIVED, 1)]
    )
    assert (sp.start_offset, sp.next_offset) == (13, 20)
    assert sp.fetch_offset() == 13
    got = sp.acquire("m", batches((10, 14), (15, 19)), 500, 500, 0, LOCK)
    assert got == [(13, 14, 1), (15, 17, 3)]


def test_log_start_moving_past_spso() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    assert ack(sp, "m1", (0, 1, [RELEASE])) == ErrorCode.NO_ERROR
    sp.log_start_moved(3)
    assert sp.start_offset == 3
    assert ack(sp, "m1", (0, 2, [ACCEPT])) == ErrorCode.NO_ERROR  # below SPSO: ignored
    assert ack(sp, "m1", (3, 4, [ACCEPT])) == ErrorCode.NO_ERROR
    assert sp.start_offset == 5 and sp.records.get(2) is not None  # locked until it ends
    sp.expire(LOCK)
    assert 2 not in sp.records


# -- a model: random operations, Kafka's invariants
_op = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from("ab"), st.integers(1, 8)),
    st.tuples(
        st.just("ack"),
        st.sampled_from("ab"),
        st.integers(0, 30),
        st.integers(0, 4),
        st.sampled_from([ACCEPT, RELEASE, REJECT, GAP]),
    ),
    st.tuples(
        st.just("fail"),
        st.sampled_from("ab"),
        st.integers(0, 30),
        st.integers(0, 4),
        st.sampled_from([ACCEPT, RELEASE]),
    ),
    st.tuples(st.just("tick"), st.integers(0, 40000)),
    st.tuples(st.just("leave"), st.sampled_from("ab")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=40))
def test_model_invariants(ops: list[tuple[object, ...]]) -> None:
    log = [(i * 3, i * 3 + 2) for i in range(10)]  # 30 records in 3-record batches
    limit = 3
    sp = SharePartition(0, delivery_count_limit=limit, max_in_flight=12)
    now = 0
    done: set[int] = set()  # acknowledged or archived: never handed out again
    deliveries: dict[int, int] = {}
    holder: dict[int, str] = {}
    for op in ops:
        if op[0] == "acquire":
            member, n = str(op[1]), int(str(op[2]))
            start = sp.fetch_offset()
            got = sp.acquire(member, [b for b in log if b[1] >= start], n, 6, now, LOCK)
            for first, last, count in got:
                for o in range(first, last + 1):
                    assert o not in done
                    assert o not in holder  # never two holders
                    deliveries[o] = deliveries.get(o, 0) + 1
                    assert count == deliveries[o] <= limit
                    holder[o] = member
        elif op[0] in ("ack", "fail"):
            member, first, n, kind = str(op[1]), int(str(op[2])), int(str(op[3])), int(str(op[4]))
            err, changes = sp.acknowledge(member, [(first, first + n, [kind])])
            owned = all(
                holder.get(o) == member for o in range(max(first, sp.start_offset), first + n + 1)
            )
            if err == ErrorCode.NO_ERROR:
                assert owned
                if op[0] == "fail":
                    for b in sp.rollback(changes):
                        for o in range(b.first_offset, b.last_offset + 1):
                            holder.pop(o, None)
                            if b.delivery_state == ARCHIVED:
                                done.add(o)
                    continue
                sp.commit(changes)
                for b in changes:
                    for o in range(b.first_offset, b.last_offset + 1):
                        holder.pop(o, None)
                        if b.delivery_state != AVAILABLE:
                            done.add(o)
        elif op[0] == "tick":
            now += int(str(op[1]))
            for b in sp.expire(now):
                for o in range(b.first_offset, b.last_offset + 1):
                    holder.pop(o, None)
                    if b.delivery_state == ARCHIVED:
                        done.add(o)
        else:
            for b in sp.release_member(str(op[1])):
                for o in range(b.first_offset, b.last_offset + 1):
                    holder.pop(o, None)
                    if b.delivery_state == ARCHIVED:
                        done.add(o)
        # SPSO is the first offset not terminal
        o = 0
        while o in done:
            o += 1
        assert sp.start_offset == min(o, sp.next_offset)
        assert sp.next_offset - sp.start_offset <= 12 + 2


def test_record_limit_mode_takes_at_most_max_records_in_one_range() -> None:
    # testAcquireSingleBatchInRecordLimitMode (ShareFetch v2, acquire mode 1)
    sp = SharePartition(0)
    got = sp.acquire("m", batches((0, 4), (5, 9)), 3, 500, 0, LOCK, record_limit=True)
    assert got == [(0, 2, 1)]
    assert sp.next_offset == 3 and sp.fetch_offset() == 3
    got = sp.acquire("m", batches((0, 4), (5, 9)), 4, 500, 0, LOCK, record_limit=True)
    assert got == [(3, 6, 1)]


def test_renew_restarts_the_lock() -> None:
    # testRenewAcknowledgeWithCompleteBatchAck (RENEW, v2)
    sp = SharePartition(0)
    sp.acquire("m", batches((0, 4)), 500, 500, 0, LOCK)
    assert sp.renew("other", [(0, 4)], 10, LOCK) == ErrorCode.INVALID_RECORD_STATE
    assert sp.renew("m", [(0, 4)], 10, LOCK) == ErrorCode.NO_ERROR
    assert sp.expire(LOCK) == []  # the old lock ran out, the renewed one holds
    assert sp.expire(LOCK + 10) == [B(0, 4, AVAILABLE, 1)]


def test_renew_refused_when_the_group_disables_it() -> None:
    # share.renew.acknowledge.enable=false: Kafka checks the record is the member's first,
    # then refuses the renewal with INVALID_RECORD_STATE; the lock runs out as before
    sp = SharePartition(0)
    sp.acquire("m", batches((0, 4)), 500, 500, 0, LOCK)
    assert sp.renew("other", [(0, 4)], 10, LOCK, enabled=False) == ErrorCode.INVALID_RECORD_STATE
    assert sp.error_message == "Member is not the owner of offset"
    assert sp.renew("m", [(0, 4)], 10, LOCK, enabled=False) == ErrorCode.INVALID_RECORD_STATE
    assert sp.error_message == "Renewing acquisition locks is not enabled for the group."
    assert sp.expire(LOCK) == [B(0, 4, AVAILABLE, 1)]
    sp.acquire("m", batches((0, 4)), 500, 500, LOCK, LOCK)
    assert sp.renew("m", [(0, 4)], LOCK + 10, LOCK) == ErrorCode.NO_ERROR
    assert sp.error_message is None
    assert sp.expire(2 * LOCK) == []


def test_read_committed_archives_aborted_batches() -> None:
    # testAcquireWithReadCommittedIsolationLevel: aborted records are cut out of the ranges
    sp = SharePartition(0)
    got = sp.acquire(
        "m", batches((0, 2), (3, 5), (6, 6), (7, 9)), 500, 500, 0, LOCK, aborted=frozenset({3})
    )
    assert got == [(0, 2, 1), (6, 9, 1)]
    assert all(sp.records[o].state == ARCHIVED for o in range(3, 6))
    assert ack(sp, "m", (0, 2, [ACCEPT]), (6, 9, [ACCEPT])) == ErrorCode.NO_ERROR
    assert sp.start_offset == 10


def test_acknowledgement_errors_carry_kafkas_messages() -> None:
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 500, 500, 0, LOCK)
    sp.acquire("m2", batches((5, 9)), 500, 500, 0, LOCK)
    # a whole cached batch: batch-level messages
    assert ack(sp, "m1", (5, 9, [ACCEPT])) == ErrorCode.INVALID_RECORD_STATE
    assert sp.error_message == "Member is not the owner of batch record"
    # part of one: per offset from now on
    assert ack(sp, "m1", (6, 6, [ACCEPT])) == ErrorCode.INVALID_RECORD_STATE
    assert sp.error_message == "Member is not the owner of offset"
    assert ack(sp, "m1", (0, 12, [ACCEPT])) == ErrorCode.INVALID_REQUEST
    assert sp.error_message == (
        "Batch record not found. The last offset in request is past acquired records."
    )
    assert ack(sp, "m1", (0, 4, [ACCEPT])) == ErrorCode.NO_ERROR
    assert ack(sp, "m2", (5, 6, [ACCEPT]), (7, 7, [RELEASE])) == ErrorCode.NO_ERROR
    assert ack(sp, "m2", (7, 9, [ACCEPT])) == ErrorCode.INVALID_RECORD_STATE
    assert sp.error_message == "The batch cannot be acknowledged. The offset is not acquired."


def test_throttled_redelivery_as_kafka_4_4() -> None:
    # Ten records in one batch released at every delivery (limit 5): from count 3 (half the
    # limit) on fewer at a time, then one by one on their last attempt -- the sequence
    # Kafka 4.4 answers (tests/differential: share_throttle_scenario).
    sp = SharePartition(0)
    seq = []
    while got := sp.acquire("m", batches((0, 9)), 500, 500, 0, LOCK):
        seq.append(got)
        assert ack(sp, "m", *[(f, last, [RELEASE]) for f, last, _ in got]) == ErrorCode.NO_ERROR
    assert seq == [
        [(0, 9, 1)],
        [(0, 9, 2)],
        [(0, 9, 3)],
        [(0, 4, 4)],
        *([(o, o, 5)] for o in range(5)),
        [(5, 9, 4)],
        *([(o, o, 5)] for o in range(5, 10)),
    ]
    assert sp.start_offset == 10  # all archived at the limit
