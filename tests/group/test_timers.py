"""The shard's one timer table: deadlines, the heap that orders them, the runtime's wake-up."""

from coordinator.group.timers import REMOVED, Timer, TimerAction, TimerKind, Timers
from coordinator.group.types import Result

ACTION = TimerAction(TimerKind.HEARTBEAT, "g", "m")


def fire_all(timers: Timers, until: int) -> list[tuple[int, str]]:
    """(time, key) of every firing up to ``until``, each at its armed time."""
    fired = []
    while (at := timers.next_deadline()) is not None and at <= until:
        timer = timers.pop_due(at)
        if timer is not None:
            fired.append((at, timer.key))
    return fired


def test_timers_fire_in_deadline_order_and_ties_in_key_order() -> None:
    timers = Timers()
    out = Result()
    for key, deadline in (("b", 20), ("c", 10), ("a", 20)):
        timers.schedule(out, key, deadline, ACTION)
    assert fire_all(timers, 100) == [(10, "c"), (20, "a"), (20, "b")]
    assert timers.next_deadline() is None and "a" not in timers


def test_a_deadline_moved_later_fires_then_and_needs_no_wakeup() -> None:
    timers = Timers()
    first = Result()
    timer = timers.schedule(first, "k", 100, ACTION)
    assert first.wakeup == 100
    later = Result()
    assert timers.schedule(later, "k", 150, ACTION) is timer
    assert later.wakeup is None and timer.armed_ms == 100  # no heap work
    assert timers.pop_due(100) is None  # its old entry comes up: pushed again for 150
    assert timers.next_deadline() == 150
    assert timers.pop_due(150) is timer and timer.armed_ms == REMOVED


def test_a_deadline_moved_earlier_fires_early_and_wakes_the_runtime() -> None:
    timers = Timers()
    timers.schedule(Result(), "k", 100, ACTION)
    timers.schedule(Result(), "other", 60, ACTION)
    earlier = Result()
    timers.schedule(earlier, "k", 50, ACTION)
    assert earlier.wakeup == 50  # earlier than anything armed
    not_first = Result()
    timers.schedule(not_first, "third", 70, ACTION)
    assert not_first.wakeup is None  # the runtime is woken by 50 anyway
    assert fire_all(timers, 200) == [(50, "k"), (60, "other"), (70, "third")]


def test_a_cancelled_timer_never_fires_and_may_be_scheduled_again() -> None:
    timers = Timers()
    old = timers.schedule(Result(), "k", 100, ACTION)
    timers.cancel("k")
    assert old.armed_ms == REMOVED and "k" not in timers and timers.next_deadline() is None
    new = timers.schedule(Result(), "k", 300, ACTION)
    assert new is not old
    assert fire_all(timers, 1000) == [(300, "k")]


def test_cancel_group_cancels_only_that_groups_timers() -> None:
    timers = Timers()
    timers.schedule(Result(), "join-g", 10, TimerAction(TimerKind.JOIN, "g"))
    timers.schedule(Result(), "join-h", 10, TimerAction(TimerKind.JOIN, "h"))
    timers.schedule(Result(), "heartbeat-g-m", 10, ACTION)
    timers.cancel_group("g")
    assert timers.deadlines() == {"join-h": 10}


def test_stale_heap_entries_are_compacted() -> None:
    timers = Timers()
    for i in range(1000):
        timers.schedule(Result(), f"k{i}", 1000 + i, ACTION)
        timers.cancel(f"k{i}")
    live: Timer = timers.schedule(Result(), "live", 5000, ACTION)
    assert len(timers._heap) <= 2 * 1 + 64 + 1
    assert fire_all(timers, 10_000) == [(5000, "live")] and live.armed_ms == REMOVED
