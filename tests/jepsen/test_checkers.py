"""Trust the checkers: each one against planted anomalies and against valid histories.

Hand-written histories carry one anomaly each (a stale read, a lost acknowledged write, a
rewind, a double owner, a poll skip, a duplicate...) and must be caught; valid concurrent
histories (with info ops) must pass. Hypothesis builds random valid register histories from a
sequential model, each op's interval stretched at random around its linearization point, and
mutates non-overlapping ones into stale reads the search must reject.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.jepsen.checks import check_membership, check_queue, kinds
from support.jepsen.history import FAIL, INFO, OK, History, Op, pair_ops, read_history
from support.jepsen.linear import check_key, check_registers, final_read_check

KEY = ("g0", "t0", 0)
GROUP = ("g1", "", -1)
QUEUE = ("t2", "", 0)


def w(p: int, v: int, start: float, end: float, status: str = OK) -> Op:
    return Op(p, "write", KEY, v, start, math.inf if status == INFO else end, status, v)


def r(p: int, v: int | None, start: float, end: float, status: str = OK) -> Op:
    return Op(p, "read", KEY, v, start, end, status)


def verdict(ops: list[Op]) -> str:
    return check_key(ops, KEY).verdict


# Registers: valid concurrent histories.


def test_sequential_and_concurrent_histories_are_linearizable() -> None:
    assert verdict([w(1, 1, 0, 10), r(2, 1, 11, 12), w(1, 2, 13, 20), r(2, 2, 21, 22)]) == "ok"
    # Two overlapping writes: a reader may see either order, each read consistent with one.
    assert verdict([w(1, 1, 0, 10), w(2, 2, 0, 10), r(3, 1, 11, 12), r(3, 1, 13, 14)]) == "ok"
    assert verdict([w(1, 1, 0, 10), w(2, 2, 0, 10), r(3, 2, 11, 12)]) == "ok"
    # A read overlapping a write may see the old or the new value.
    assert verdict([w(1, 1, 0, 5), w(1, 2, 6, 20), r(2, 1, 7, 8), r(3, 2, 9, 10)]) == "ok"
    assert verdict([r(1, None, 0, 1), w(1, 1, 2, 3)]) == "ok"


def test_info_write_may_take_effect_late_or_never() -> None:
    base = [w(1, 1, 0, 10), w(2, 2, 11, 12, INFO)]
    assert verdict([*base, r(3, 1, 20, 21)]) == "ok"  # never (yet)
    assert verdict([*base, r(3, 1, 20, 21), r(3, 2, 30, 31)]) == "ok"  # later
    # Once seen, it cannot un-happen.
    assert verdict([*base, r(3, 2, 20, 21), r(3, 1, 30, 31)]) == "fail"


def test_failed_writes_and_failed_reads_are_dropped() -> None:
    ops = [w(1, 1, 0, 10), w(2, 2, 11, 12, FAIL), r(3, 99, 13, 14, FAIL), r(3, 1, 20, 21)]
    assert verdict(ops) == "ok"
    assert not check_registers(ops).kinds()


# Registers: planted anomalies.


def test_stale_read_is_caught_with_a_witness() -> None:
    ops = [w(1, 1, 0, 10), w(1, 2, 11, 20), r(2, 1, 21, 22)]
    res = check_key(ops, KEY)
    assert res.verdict == "fail"
    assert res.witness is not None
    assert res.witness.op.f == "read" and res.witness.op.value == 1
    assert res.witness.state_before == 2
    assert check_registers(ops).kinds() == {"stale", "nonlinearizable"}


def test_lost_acknowledged_write_is_caught() -> None:
    ops = [w(1, 1, 0, 10), r(2, None, 11, 12)]
    assert check_registers(ops).kinds() == {"lost", "nonlinearizable"}


def test_rewind_between_reads_is_caught_by_the_search() -> None:
    # Two concurrent writes; readers see 2 then 1: no order of the writes explains both.
    ops = [w(1, 1, 0, 10), w(2, 2, 0, 10), r(3, 2, 11, 12), r(3, 1, 13, 14)]
    assert verdict(ops) == "fail"


def test_read_rewind_is_caught_fast() -> None:
    # An info write seen by one read, then an older value seen by a later read (a dirty read
    # of a commit that never became durable): no acknowledged write is involved.
    ops = [w(1, 1, 0, 1), w(1, 2, 2, 3, INFO), r(2, 2, 4, 5), r(3, 1, 6, 7)]
    assert "read-rewind" in check_registers(ops).kinds()
    assert verdict(ops) == "fail"
    # Overlapping reads may see the two values in either order.
    assert (
        "read-rewind"
        not in check_registers(
            [w(1, 1, 0, 1), w(1, 2, 2, 10), r(2, 2, 3, 5), r(3, 1, 4, 7)]
        ).kinds()
    )


def test_unread_info_writes_do_not_blow_up_the_search() -> None:
    # A writer retired after each of 60 timeouts: 2^60 orders unless unread ones are dropped.
    ops = [w(100 + i, i, 10 * i, 0, INFO) for i in range(1, 61)]
    ops += [w(1, 1000, 700, 701), r(2, 1000, 702, 703), r(2, 30, 704, 705)]
    # An info write may take effect long after, even after a later acknowledged one.
    assert check_key(ops, KEY, max_steps=100_000).verdict == "ok"
    ops += [r(2, 1000, 706, 707), r(2, 30, 708, 709)]  # but it cannot take effect twice
    assert check_key(ops, KEY, max_steps=100_000).verdict == "fail"


def test_phantom_and_failed_visible() -> None:
    assert "phantom" in check_registers([w(1, 1, 0, 10), r(2, 7, 11, 12)]).kinds()
    ops = [w(1, 1, 0, 10), w(1, 2, 11, 12, FAIL), r(2, 2, 13, 14)]
    assert check_registers(ops).kinds() == {"failed-visible", "nonlinearizable"}


def test_final_read_invariants() -> None:
    ops = [w(1, 1, 0, 10), w(1, 2, 11, 20)]
    assert not final_read_check(ops, r(9, 2, 30, 31))
    assert {a.kind for a in final_read_check(ops, r(9, 1, 30, 31))} == {"stale"}
    assert {a.kind for a in final_read_check(ops, r(9, None, 30, 31))} == {"lost"}
    failed = [*ops, w(1, 3, 21, 22, FAIL)]
    assert {a.kind for a in final_read_check(failed, r(9, 3, 30, 31))} == {"failed-visible"}


def test_budget_exhausted_is_unknown_never_ok() -> None:
    ops = [w(p, p, 0, 100) for p in range(1, 9)] + [r(9, 8, 101, 102)]
    assert check_key(ops, KEY, max_steps=3).verdict == "unknown"
    assert check_key(ops, KEY).verdict == "ok"


def test_keys_are_checked_apart() -> None:
    other = ("g0", "t0", 1)
    ops = [w(1, 1, 0, 10), Op(2, "read", other, None, 11, 12, OK), r(3, 1, 11, 12)]
    assert check_registers(ops).valid


# Random histories from a sequential model.


@st.composite
def register_history(draw: st.DrawFn, overlap: bool = True) -> list[Op]:
    steps = draw(st.lists(st.booleans(), min_size=1, max_size=14))  # True = write
    ops: list[Op] = []
    state: int | None = None
    value = 0
    for i, is_write in enumerate(steps):
        point = 100.0 * i
        spread = 250.0 if overlap else 40.0
        start = point - draw(st.floats(0, spread))
        end = point + draw(st.floats(0, spread))
        if is_write:
            value += 1
            state = value
            status = draw(st.sampled_from([OK, OK, OK, INFO]))
            ops.append(w(i, value, start, end, status))
        else:
            ops.append(r(i, state, start, end))
    # Writes that never happened, failed reads: noise the checker must drop.
    for j in range(draw(st.integers(0, 2))):
        t = draw(st.floats(0, 100.0 * len(steps)))
        ops.append(w(100 + j, 1000 + j, t, t + 5, FAIL))
        ops.append(r(200 + j, 5000 + j, t, t + 5, draw(st.sampled_from([FAIL, INFO]))))
    return ops


@settings(max_examples=150, deadline=None)
@given(register_history())
def test_random_valid_histories_pass(ops: list[Op]) -> None:
    res = check_registers(ops)
    assert res.valid, (res.anomalies, res.keys)


@settings(max_examples=100, deadline=None)
@given(register_history(overlap=False), st.data())
def test_random_stale_reads_fail(ops: list[Op], data: st.DataObject) -> None:
    """A read changed to a value it cannot see: overwritten before it began (by an
    acknowledged write), not yet written when it ended, or None after an acknowledged write."""
    acked = [op for op in ops if op.f == "write" and op.status == OK]
    reads = [op for op in ops if op.f == "read" and op.status == OK]
    if not reads:
        return
    read = data.draw(st.sampled_from(reads))
    before = [x for x in acked if x.end < read.start]
    wrong: list[int | None] = [
        x.invoke_value for x in before if any(x.end < y.start for y in before)
    ]
    wrong += [x.invoke_value for x in ops if x.f == "write" and x.start > read.end]
    if before:
        wrong.append(None)
    wrong = [v for v in wrong if v != read.value and not (v is not None and v >= 1000)]
    if not wrong:
        return
    read.value = data.draw(st.sampled_from(wrong))
    assert check_key(ops, KEY).verdict == "fail"


# The history file.


def test_history_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = History(path)
    h.invoke(1, "write", KEY, 5)
    h.invoke(2, "read", KEY)
    h.ok(1)
    h.ok(2, 5)
    h.invoke(3, "write", KEY, 6)
    h.info(3, "timeout")
    h.invoke(4, "write", KEY, 7)  # never completed: the harness died
    h.close()
    events = read_history(path)
    assert events == h.events
    assert [e.kind for e in events] == ["invoke", "invoke", "ok", "ok", "invoke", "info", "invoke"]
    assert all(a.time_ns <= b.time_ns for a, b in itertools.pairwise(events))
    ops = pair_ops(events)
    assert [(o.f, o.value, o.status) for o in ops] == [
        ("write", 5, OK),
        ("read", 5, OK),
        ("write", 6, INFO),
        ("write", 7, INFO),
    ]
    assert ops[2].end == math.inf and ops[3].end == math.inf
    assert check_registers(ops).valid


# Membership.


def view(p: int, member: str, gen: int, parts: list[int], t: float) -> Op:
    value: dict[str, Any] = {
        "member": member,
        "generation": gen,
        "assignment": [["t1", x] for x in parts],
    }
    return Op(p, "view", GROUP, value, t, t + 1, OK)


def commit(p: int, member: str, gen: int, t: float, status: str = OK) -> Op:
    value = {"member": member, "generation": gen}
    return Op(p, "commit", GROUP, value, t, t + 1, status, value)


def test_valid_membership_passes() -> None:
    ops = [
        view(1, "a", 1, [0, 1, 2], 0),
        commit(1, "a", 1, 2),
        view(1, "a", 2, [0, 1], 10),
        view(2, "b", 2, [2], 10),
        commit(2, "b", 2, 12),
        commit(1, "a", 1, 13, FAIL),  # fenced and refused: fine
    ]
    assert not check_membership(ops)


def test_double_owner_is_caught() -> None:
    ops = [view(1, "a", 3, [0, 1], 0), view(2, "b", 3, [1, 2], 0)]
    assert kinds(check_membership(ops)) == {"double-owner"}


def test_generation_going_back_is_caught() -> None:
    ops = [view(1, "a", 5, [0], 0), view(1, "a", 4, [0], 10)]
    assert kinds(check_membership(ops)) == {"generation-back"}


def test_a_classic_join_generation_lost_with_its_coordinator_is_not_an_anomaly() -> None:
    join3 = view(1, "a", 3, [], 10)
    join3.value["phase"] = "join"
    # Generation 3 was answered by JoinGroup, its coordinator lost before SyncGroup wrote it:
    # the next coordinator loads generation 2, where a's commits are current (Kafka too).
    ops = [view(1, "a", 2, [0], 0), join3, view(1, "a", 2, [0], 20), commit(1, "a", 2, 22)]
    assert not check_membership(ops)
    # A generation SyncGroup answered is durable: going back below it is an anomaly.
    synced = [view(1, "a", 3, [0], 10), view(1, "a", 2, [0], 20), commit(1, "a", 2, 22)]
    assert kinds(check_membership([view(1, "a", 2, [0], 0), *synced])) == {
        "generation-back",
        "fenced-commit",
    }


def test_commit_from_a_fenced_generation_is_caught() -> None:
    ops = [view(1, "a", 1, [0], 0), view(2, "b", 2, [0], 10), commit(1, "a", 1, 20)]
    assert kinds(check_membership(ops)) == {"fenced-commit"}
    fenced = Op(3, "fenced", GROUP, {"member": "c", "generation": 7}, 0, 1, OK)
    assert kinds(check_membership([fenced, commit(3, "c", 7, 5)])) == {"fenced-commit"}


def hb(p: int, member: str, epoch: int, parts: list[int], t: float, status: str = OK) -> Op:
    """A KIP-848 heartbeat answered at t + 1 with the partitions the member owns after it."""
    value = {"member": member, "generation": epoch, "assignment": [["t1", x] for x in parts]}
    return Op(p, "view", GROUP, value, t, t + 1, status, {"member": member, "protocol": "consumer"})


def test_kip848_handoff_after_release_passes() -> None:
    ops = [
        hb(1, "a", 1, [0, 1], 0),
        hb(1, "a", 2, [0], 10),  # told to give 1 up (its request still owned 0 and 1)
        hb(1, "a", 2, [0], 20),  # the release: this request owns only 0
        hb(2, "b", 2, [1], 25),  # 1 handed over after the release was sent
        hb(1, "a", 2, [0], 30),
    ]
    assert not check_membership(ops)


def test_kip848_partition_owned_twice_is_caught() -> None:
    ops = [
        hb(1, "a", 1, [0, 1], 0),
        hb(2, "b", 2, [1], 5),  # b handed 1 while a holds it
        hb(1, "a", 1, [0, 1], 10),  # a still owns 1 and the coordinator answers ok
    ]
    assert kinds(check_membership(ops)) == {"owned-twice"}


def test_kip848_handoff_from_a_fenced_or_crashed_member_passes() -> None:
    fenced = [
        hb(1, "a", 1, [0, 1], 0),
        hb(2, "b", 2, [1], 5),
        hb(1, "a", 1, [0, 1], 10, FAIL),  # FENCED_MEMBER_EPOCH: a was expired meanwhile
    ]
    assert not check_membership(fenced)
    crashed = [hb(1, "a", 1, [0, 1], 0), hb(2, "b", 2, [0, 1], 20)]  # a stopped at 1
    assert not check_membership(crashed)
    # a got 1 back after b held it: a's later requests carrying 1 are fine.
    back = [
        hb(2, "b", 1, [1], 0),
        hb(2, "b", 2, [], 5),
        hb(2, "b", 2, [], 6),
        hb(1, "a", 2, [1], 8),
        hb(1, "a", 2, [1], 12),
    ]
    assert not check_membership(back)


def test_kip848_commit_is_fenced_only_by_its_member_fencing() -> None:
    later_epoch = view(2, "b", 9, [1], 0)
    current = commit(1, "a", 4, 10)
    current.invoke_value["protocol"] = "consumer"
    assert not check_membership([view(1, "a", 4, [0], 0), later_epoch, current])
    fenced = Op(3, "fenced", GROUP, {"member": "a", "generation": 4}, 5, 6, OK)
    assert kinds(check_membership([later_epoch, fenced, current])) == {"fenced-commit"}


# Queue.


def send(p: int, v: int, offset: int, t: float, status: str = OK) -> Op:
    return Op(p, "send", QUEUE, [offset, v], t, t + 1, status, v)


def poll(p: int, records: dict[str, list[list[int]]], t: float) -> Op:
    return Op(p, "poll", QUEUE, records, t, t + 1, OK)


def test_valid_queue_passes() -> None:
    ops = [
        send(1, 10, 0, 0),
        send(1, 11, 1, 2),
        send(2, 12, 3, 3),  # offset 2 is a transaction marker: gaps are fine
        poll(3, {"0": [[0, 10], [1, 11]]}, 5),
        poll(3, {"0": [[3, 12]]}, 7),
        Op(3, "subscribe", QUEUE, None, 8, 9, OK),
        poll(3, {"0": [[1, 11]]}, 10),  # redelivery after a rebalance: at-least-once
    ]
    assert not check_queue(ops)


def test_lost_write_and_unseen() -> None:
    ops = [send(1, 10, 0, 0), send(1, 11, 1, 1), send(1, 12, 2, 2), poll(3, {"0": [[0, 10]]}, 5)]
    ops.append(poll(4, {"0": [[2, 12]]}, 6))
    assert kinds(check_queue(ops)) == {"lost-write"}
    assert kinds(check_queue([send(1, 10, 0, 0)])) == {"unseen"}


def test_duplicate_and_inconsistent_offsets() -> None:
    dup = [send(1, 10, 0, 0), poll(3, {"0": [[0, 10], [1, 10]]}, 5)]
    assert "duplicate" in kinds(check_queue(dup))
    clash = [send(1, 10, 0, 0), send(2, 11, 1, 0), poll(3, {"0": [[0, 11], [1, 11]]}, 5)]
    assert {"inconsistent-offsets", "duplicate"} <= kinds(check_queue(clash))


def test_poll_skip_and_nonmonotonic_poll() -> None:
    sends = [send(1, 10 + i, i, i) for i in range(4)]
    skip = [*sends, poll(3, {"0": [[0, 10], [1, 11]]}, 9), poll(3, {"0": [[3, 13]]}, 10)]
    skip.append(poll(4, {"0": [[2, 12]]}, 11))
    assert kinds(check_queue(skip)) == {"poll-skip"}
    back = [*sends, poll(3, {"0": [[0, 10], [1, 11]]}, 9), poll(3, {"0": [[1, 11], [2, 12]]}, 10)]
    back.append(poll(4, {"0": [[3, 13]]}, 11))
    assert kinds(check_queue(back)) == {"nonmonotonic-poll"}
    inner = [*sends, poll(3, {"0": [[0, 10], [2, 12], [1, 11], [3, 13]]}, 9)]
    assert kinds(check_queue(inner)) == {"int-poll-skip", "int-nonmonotonic-poll"}


def test_aborted_read_and_nonmonotonic_send() -> None:
    ops = [send(1, 10, 0, 0), send(1, 11, -1, 1, FAIL), poll(3, {"0": [[0, 10], [1, 11]]}, 5)]
    assert kinds(check_queue(ops)) == {"aborted-read"}
    ops = [send(1, 10, 1, 0), send(1, 11, 0, 2), poll(3, {"0": [[0, 11], [1, 10]]}, 5)]
    assert kinds(check_queue(ops)) == {"nonmonotonic-send"}
