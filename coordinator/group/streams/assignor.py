"""The sticky task assignor of streams groups (Kafka's StickyTaskAssignor and ProcessState).

How this works: a task is (subtopology id, partition). A *process* (one Kafka Streams
instance, its ``ProcessId``) runs one member per stream thread; its capacity is its member
count and its load its assigned tasks over that capacity. Two quotas bound a member:
``ceil(active tasks / members)`` for actives and ``ceil((actives + stateful tasks x standby
replicas) / members)`` for all tasks. When a member reaches a quota exactly it leaves that
quota's pool, and the quota is recomputed over the tasks and members left.

Actives, ordered by (partition, subtopology):
1. stay with their previous-target owner while it is under the active quota;
2. else go to the least-loaded previous standby holder under the quota (a candidate beats
   the current pick only if both its process load and its own count are lower; standby
   holders rank before members that only reported offsets for the task, most caught-up
   first);
3. the rest, re-ordered by (subtopology, partition), go one by one to the least-loaded
   process's least-loaded member: a range-like spread for a fresh group.

Standbys (only stateful subtopologies, ``num_standby_replicas`` each), ordered by
(partition, subtopology) descending: to the previous active owner, else the least-loaded
previous standby holder, when its process does not hold the task and it is under the total
quota; what is left goes, by (subtopology, partition) descending, to the least-loaded
process that does not hold the task. A process never holds two copies of one task, so a
task gets at most ``processes - 1`` standbys. Warm-up tasks are never produced, as in
Kafka 4.4.

Ties are Kafka's: its least-loaded process and member come from ``java.util.PriorityQueue``s
compared by load alone, so equal loads resolve by the heap's internal order, which follows
the order elements were added. That order is Java's ``HashMap`` iteration order: members as
Kafka's ``TargetAssignmentBuilder`` puts them into a ``HashMap`` (bucket order of the member
ids, the caller's order within a bucket), processes as ``HashMap(members)`` holds them, a
process's members as its own ``HashMap``
(``computeIfAbsent`` puts a new process first in its bucket). ``JavaPriorityQueue`` is Java's heap, and the
previous standby candidates keep that member order under their stable sort.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

from coordinator.group.streams.javaorder import (
    JavaPriorityQueue,
    java_compute_if_absent_order,
    java_hash_order,
)

__all__ = [
    "AssignmentMember",
    "MemberTasks",
    "SubtopologySpec",
    "TaskAssignorError",
    "assign",
]

log = logging.getLogger(__name__)

Task = tuple[str, int]


class TaskAssignorError(Exception):
    """The assignor could not place an active task (Kafka's TaskAssignorException)."""


@dataclass(frozen=True, slots=True)
class SubtopologySpec:
    subtopology_id: str
    number_of_tasks: int
    stateful: bool


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    member_id: str
    process_id: str
    # The member's previous *target* tasks: subtopology id -> partitions.
    active_tasks: Mapping[str, Iterable[int]] = field(default_factory=dict)
    standby_tasks: Mapping[str, Iterable[int]] = field(default_factory=dict)
    # Changelog offset sums the member reported (TaskOffsets): subtopology -> partition -> sum.
    task_offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)


@dataclass(slots=True)
class MemberTasks:
    active: dict[str, list[int]] = field(default_factory=dict)
    standby: dict[str, list[int]] = field(default_factory=dict)


class _Process:
    __slots__ = (
        "active",
        "by_load",
        "capacity",
        "counts",
        "held",
        "load",
        "process_id",
        "standby",
        "total",
    )

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self.capacity = 0
        self.total = 0
        self.load = float("inf")
        self.counts: dict[str, int] = {}
        self.held: set[Task] = set()
        self.active: dict[str, list[Task]] = {}
        self.standby: dict[str, list[Task]] = {}
        # Members by task count ([member id, count] entries), built lazily and dropped when a
        # task is added to a named member, as Kafka's ProcessState.membersByLoad.
        self.by_load: JavaPriorityQueue[list[object]] | None = None

    def add_member(self, member_id: str) -> None:
        self.counts[member_id] = 0
        self.capacity += 1
        self._compute_load()

    def _compute_load(self) -> None:
        self.load = self.total / self.capacity if self.capacity > 0 else -1.0

    def add_task(self, member_id: str, task: Task, active: bool) -> int:
        self.by_load = None
        return self._add(member_id, task, active)

    def _add(self, member_id: str, task: Task, active: bool) -> int:
        self.held.add(task)
        (self.active if active else self.standby).setdefault(member_id, []).append(task)
        n = self.counts[member_id] + 1
        self.counts[member_id] = n
        self.total += 1
        self._compute_load()
        return n

    def add_to_least_loaded(self, task: Task, active: bool) -> int:
        if not self.counts:
            return -1
        if len(self.counts) == 1:
            return self._add(next(iter(self.counts)), task, active)
        heap = self.by_load
        if heap is None:
            heap = self.by_load = JavaPriorityQueue(_ENTRY_COUNT)
            for m, n in self.counts.items():
                heap.add([m, n])
        entry = heap.poll()
        assert entry is not None
        n = self._add(str(entry[0]), task, active)
        entry[1] = n
        heap.add(entry)
        return n


# The heaps' keys, read at each comparison (C getters: the heaps are the assignor's hot path).
_ENTRY_COUNT = itemgetter(1)
_PROCESS_LOAD = attrgetter("load")


def _java_member_order(members: Sequence[AssignmentMember]) -> list[AssignmentMember]:
    """The members as the HashMap Kafka's TargetAssignmentBuilder puts them in iterates them."""
    by_id = {m.member_id: m for m in members}
    return [by_id[mid] for mid in java_hash_order(by_id)]


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


class _State:
    def __init__(
        self, members: Sequence[AssignmentMember], subs: Sequence[SubtopologySpec], standbys: int
    ):
        self.standbys = standbys
        self.total_active = sum(s.number_of_tasks for s in subs)
        self.total = self.total_active + sum(
            s.number_of_tasks * standbys for s in subs if s.stateful
        )
        self.members_active = self.members_total = len(members)
        self.active_quota = _per_member(self.total_active, self.members_active)
        self.total_quota = _per_member(self.total, self.members_total)
        self.processes: dict[str, _Process] = {}
        self.prev_active: dict[Task, AssignmentMember] = {}
        candidates: dict[Task, list[tuple[int, int, int, AssignmentMember]]] = {}
        seq = 0
        ordered = _java_member_order(members)
        for m in ordered:
            p = self.processes.get(m.process_id)
            if p is None:
                p = self.processes[m.process_id] = _Process(m.process_id)
            p.add_member(m.member_id)
            for sub, parts in m.active_tasks.items():
                for part in parts:
                    self.prev_active[(sub, part)] = m
            standby = {(sub, part) for sub, parts in m.standby_tasks.items() for part in parts}
            for sub, part in standby:
                off = m.task_offsets.get(sub, {}).get(part, 0)
                candidates.setdefault((sub, part), []).append((0, -off, seq, m))
                seq += 1
            for sub, offsets in m.task_offsets.items():
                for part, off in offsets.items():
                    if (sub, part) not in standby:
                        candidates.setdefault((sub, part), []).append((1, -off, seq, m))
                        seq += 1
        # Kafka's processIdToState is a HashMap sized for the members and filled by
        # computeIfAbsent once per member, each process's memberToTaskCounts a default
        # HashMap filled by put: their iteration orders feed the heaps.
        order = java_compute_if_absent_order(
            [m.process_id for m in ordered], initial_capacity=len(members)
        )
        self.processes = {pid: self.processes[pid] for pid in order}
        for p in self.processes.values():
            p.counts = {mid: 0 for mid in java_hash_order(p.counts)}
        self.prev_standby = {
            t: [c[3] for c in sorted(cs, key=lambda c: c[:3])] for t, cs in candidates.items()
        }

    def count(self, m: AssignmentMember) -> int:
        return self.processes[m.process_id].counts[m.member_id]

    def took(self, n: int, active: bool) -> None:
        """A member now holds ``n`` tasks: it may leave the active and total pools."""
        if active and n == self.active_quota:
            self.members_active -= 1
            self.total_active -= n
            self.active_quota = _per_member(self.total_active, self.members_active)
        if n == self.total_quota:
            self.members_total -= 1
            self.total -= n
            self.total_quota = _per_member(self.total, self.members_total)

    def least_loaded_prev(
        self, members: list[AssignmentMember] | None, standby_task: Task | None
    ) -> AssignmentMember | None:
        pick: AssignmentMember | None = None
        pick_process = pick_member = float("inf")
        for m in members or ():
            p = self.processes[m.process_id]
            if standby_task is not None and standby_task in p.held:
                continue
            member_load = p.counts[m.member_id]
            if pick is None or (p.load < pick_process and member_load < pick_member):
                pick, pick_process, pick_member = m, p.load, member_load
        return pick


def assign(
    members: Sequence[AssignmentMember],
    subtopologies: Sequence[SubtopologySpec],
    num_standby_replicas: int,
) -> dict[str, MemberTasks]:
    """Every member's new target: actives and standbys, sorted by subtopology and partition."""
    if not members:
        return {}
    state = _State(members, subtopologies, num_standby_replicas)
    actives = [(s.subtopology_id, p) for s in subtopologies for p in range(s.number_of_tasks)]
    _assign_active(state, actives)
    if num_standby_replicas > 0:
        stateful = [
            (s.subtopology_id, p)
            for s in subtopologies
            if s.stateful
            for p in range(s.number_of_tasks)
        ]
        _assign_standby(state, stateful)
    result = {m.member_id: MemberTasks() for m in members}
    for p in state.processes.values():
        for member_id, tasks in p.active.items():
            _compact(result[member_id].active, tasks)
        for member_id, tasks in p.standby.items():
            _compact(result[member_id].standby, tasks)
    return result


def _compact(into: dict[str, list[int]], tasks: list[Task]) -> None:
    for sub, part in tasks:
        into.setdefault(sub, []).append(part)
    for parts in into.values():
        parts.sort()


def _process_heap(state: _State) -> JavaPriorityQueue[_Process]:
    heap: JavaPriorityQueue[_Process] = JavaPriorityQueue(_PROCESS_LOAD)
    for p in state.processes.values():
        heap.add(p)
    return heap


def _assign_active(state: _State, tasks: list[Task]) -> None:
    tasks.sort(key=lambda t: (t[1], t[0]))
    left: list[Task] = []
    for task in tasks:
        m = state.prev_active.get(task)
        if m is not None and state.count(m) < state.active_quota:
            state.took(state.processes[m.process_id].add_task(m.member_id, task, True), True)
        else:
            left.append(task)
    rest: list[Task] = []
    for task in left:
        m = state.least_loaded_prev(state.prev_standby.get(task), None)
        if m is not None and state.count(m) < state.active_quota:
            state.took(state.processes[m.process_id].add_task(m.member_id, task, True), True)
        else:
            rest.append(task)
    rest.sort()
    heap = _process_heap(state)
    for task in rest:
        p = heap.poll()
        if p is None:
            raise TaskAssignorError(f"No process available to assign active task {_name(task)}.")
        n = p.add_to_least_loaded(task, True)
        if n == -1:
            raise TaskAssignorError(f"No member available to assign active task {_name(task)}.")
        state.took(n, True)
        heap.add(p)


def _assign_standby(state: _State, tasks: list[Task]) -> None:
    tasks.sort(key=lambda t: (t[1], t[0]), reverse=True)
    deferred: list[tuple[Task, int]] = []
    for task in tasks:
        for i in range(state.standbys):
            m = state.prev_active.get(task)
            if m is not None:
                p = state.processes[m.process_id]
                if task not in p.held and state.count(m) < state.total_quota:
                    state.took(p.add_task(m.member_id, task, False), False)
                    continue
            m = state.least_loaded_prev(state.prev_standby.get(task), task)
            if m is not None and state.count(m) < state.total_quota:
                p = state.processes[m.process_id]
                state.took(p.add_task(m.member_id, task, False), False)
                continue
            deferred.append((task, state.standbys - i))
            break
    deferred.sort(key=lambda d: d[0], reverse=True)
    heap = _process_heap(state)
    for task, remaining in deferred:
        for i in range(remaining):
            if not _standby_to_least_loaded(state, heap, task):
                log.warning(
                    "Unable to assign %d of %d standby tasks for task [%s]. There is not enough "
                    "available capacity. You should increase the number of threads and/or "
                    "application instances to maintain the requested number of standby replicas.",
                    state.standbys - i,
                    state.standbys,
                    _name(task),
                )
                break


def _standby_to_least_loaded(state: _State, heap: JavaPriorityQueue[_Process], task: Task) -> bool:
    """The least-loaded process without ``task`` takes a standby of it.

    Kafka recurses: each polled process that holds the task polls the next, and each goes
    back into the heap as its call returns, so the last polled goes back first.
    """
    polled: list[_Process] = []
    found = False
    while True:
        p = heap.poll()
        if p is None:
            break
        polled.append(p)
        if task not in p.held:
            n = p.add_to_least_loaded(task, False)
            if n != -1:
                found = True
                state.took(n, False)
            break
        if not len(heap):
            break
    for p in reversed(polled):
        heap.add(p)
    return found


def _name(task: Task) -> str:
    return f"{task[0]}_{task[1]}"
