"""The share-partition leader: share partitions loaded, acquired from, acknowledged, released.

How this works (Kafka's SharePartitionManager and SharePartition, I/O side): a share
partition (group, topic id, partition) is loaded on the first ShareFetch naming it: its
state is read from the share coordinator (``ShareStateStore.read_state`` with the data
partition's leader epoch: 0 on one node, the lease's in cluster mode, where this node leads
a share partition while it holds the data partition's lease), a start offset of -1 resolved by the group's ``share.auto.offset.reset`` (latest:
the high watermark; earliest: the log start; ``by_duration:<ISO-8601>``: the first record at
or after now minus the duration, none yet failing the load), and the pure
``SharePartition`` built from the persisted batches. A partition whose state was never
initialized fails with UNKNOWN_SERVER_ERROR (the persister's INVALID_REQUEST, mapped as
Kafka maps it); a failed load is dropped, and the next fetch tries again.

* ``acquire`` reads whole batches from the log at the partition's fetch offset up to the
  high watermark and acquires them; the bytes returned are the raw batches overlapping
  the acquired ranges (the client drops what lies outside them).
* ``acknowledge`` marks the offsets pending, writes the changed state batches to the share
  coordinator (durable before it returns), then commits them; a failed write rolls them
  back and answers the mapped error (FENCED_* as NOT_LEADER_FOR_PARTITION, the partition
  dropped). The answer leaves only after the write.
* Lock timeouts run on one loop timer per partition (its earliest lock deadline); what
  they release, and what ``release_member`` releases (a share session closed or its
  connection gone), is persisted in the background and stands even if that write fails.
* Fetches waiting for records are woken by appends to the partition's log (the data
  plane's waiters) and by anything that makes records available here.
* Dead letters (``dlq``): records the partition moved to ARCHIVING (rejected, or at the
  delivery limit, while the group names a dead-letter topic) are copied there once that
  state is durable, each range in its own task, then archived and the change persisted;
  ARCHIVING ranges found at a load (a crash came between) are resumed the same way.
* Cluster mode: when the data partition's lease goes (the data plane's ``on_release``),
  its share partitions are dropped at once, their acquired records with them, and fetches
  waiting on them answer NOT_LEADER_OR_FOLLOWER; the next leader reads the persisted state.
* When the last share session of a group on this broker ends, the group's share
  partitions are unloaded (what Kafka's ShareGroupListener does): a later fetch loads the
  persisted state again, and with it an offset reset AlterShareGroupOffsets wrote.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from coordinator.catalog import TopicCatalog
from coordinator.dataplane import DataPlane
from coordinator.dataplane.reads import high_watermark
from coordinator.share.dlq import DeadLetterWriter
from coordinator.share.partition import Acquired, DeadLetter, SharePartition
from coordinator.share.persister import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    PersisterBatch,
    ShareStateStore,
    WriteRequest,
)
from coordinator.share.state_shard import topic_id_str
from coordinator.stores import GroupConfigStore
from protocol.errors import ErrorCode
from storage.interface import Clock, OffsetOutOfRangeError, PartitionLog, wall_clock_ms
from storage.record_batch import BatchHeader, iter_batches

log = logging.getLogger("kgc.share")

PartitionKey = tuple[str, bytes, int]  # group id, topic id, partition

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration_ms(text: str) -> int | None:
    """Java's Duration.parse for the forms share.auto.offset.reset takes (PnDTnHnMn.nS)."""
    m = _DURATION.match(text.strip().upper())
    if m is None or text.strip().upper() in ("P", "PT"):
        return None
    d, h, mi, s = (m.group(k) for k in "dhms")
    ms = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60) * 1000
    return ms + round(float(s or 0) * 1000)


_ACK_EVENTS = {ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived", AVAILABLE: "released"}


@dataclass(frozen=True, slots=True)
class ShareLeaderConfig:
    record_lock_duration_ms: int = 30000  # group.share.record.lock.duration.ms
    min_record_lock_duration_ms: int = 15000
    max_record_lock_duration_ms: int = 60000
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    partition_max_record_locks: int = 2000  # group.share.partition.max.record.locks
    max_share_sessions: int = 2000  # group.share.max.share.sessions


def persister_error(code: ErrorCode) -> ErrorCode:
    """How a share coordinator error reaches the client (Kafka's fetchPersisterError)."""
    if code in (
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return code
    if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
        return ErrorCode.NOT_LEADER_FOR_PARTITION
    return ErrorCode.UNKNOWN


@dataclass(slots=True, eq=False)
class Served:
    """A share partition this broker serves: loading, or loaded."""

    key: PartitionKey
    plog: PartitionLog
    sp: SharePartition | None = None
    state_epoch: int = 0
    # The data partition's leader epoch when loaded (its lease's in cluster mode): read
    # and write with it, so a leader that lost the partition is fenced by the next one.
    leader_epoch: int = 0
    loading: asyncio.Future[ErrorCode] | None = None
    timer: asyncio.TimerHandle | None = None
    # Dropped because this node stopped leading the data partition: fetches waiting on it
    # answer NOT_LEADER_OR_FOLLOWER.
    fenced: bool = False
    timer_at: int | None = None
    waiters: set[asyncio.Future[None]] = field(default_factory=set)


class ShareLeader:
    """Every share partition this broker leads (see the module docstring)."""

    def __init__(
        self,
        config: ShareLeaderConfig,
        state: ShareStateStore,
        data: DataPlane,
        catalog: TopicCatalog,
        group_configs: GroupConfigStore,
        *,
        clock: Clock = wall_clock_ms,
        dead_letters: DeadLetterWriter | None = None,
    ) -> None:
        self.config = config
        self.dead_letters = dead_letters or DeadLetterWriter(data, catalog, group_configs)
        self.state = state
        self.data = data
        self.catalog = catalog
        self.group_configs = group_configs
        self.clock = clock
        self.served: dict[PartitionKey, Served] = {}
        self.background: set[asyncio.Task[None]] = set()
        # Called after a share partition changed (metrics, tests): (key, what happened).
        self.on_event: list[Callable[[PartitionKey, str, int], None]] = []
        data.on_release.append(self.partition_released)

    # -- group configs
    def _group_config(self, group_id: str, name: str) -> str | None:
        return self.group_configs.get(group_id).get(name)

    def lock_duration_ms(self, group_id: str) -> int:
        value = self._group_config(group_id, "share.record.lock.duration.ms")
        return int(value) if value is not None else self.config.record_lock_duration_ms

    def _delivery_count_limit(self, group_id: str) -> int:
        value = self._group_config(group_id, "share.delivery.count.limit")
        return int(value) if value is not None else self.config.delivery_count_limit

    def _max_record_locks(self, group_id: str) -> int:
        value = self._group_config(group_id, "share.partition.max.record.locks")
        return int(value) if value is not None else self.config.partition_max_record_locks

    def renew_enabled(self, group_id: str) -> bool:
        """share.renew.acknowledge.enable (true unless the group turned it off)."""
        value = self._group_config(group_id, "share.renew.acknowledge.enable")
        return value is None or value.strip().lower() != "false"

    def _with_configs(self, entry: Served) -> SharePartition:
        """The partition, told its group's dynamic configs now (whether it has a dead-letter
        topic, its delivery limit and record-lock limit), read again before each change as
        Kafka's SharePartition reads them through its config provider."""
        sp = entry.sp
        assert sp is not None
        group_id = entry.key[0]
        sp.dlq = self.dead_letters.topic_of(group_id) is not None
        sp.delivery_count_limit = self._delivery_count_limit(group_id)
        sp.max_in_flight = self._max_record_locks(group_id)
        return sp

    def _reset_offset(self, group_id: str, plog: PartitionLog) -> int | None:
        """share.auto.offset.reset applied now; None: by_duration finds no record yet."""
        policy = (self._group_config(group_id, "share.auto.offset.reset") or "latest").strip()
        if policy == "earliest":
            return plog.log_start_offset
        if policy.startswith("by_duration:"):
            duration = parse_duration_ms(policy.split(":", 1)[1]) or 0
            found = plog.offset_for_timestamp(self.clock() - duration)
            return None if found is None else found[0]
        return high_watermark(plog)

    # -- loading
    def log_of(self, topic_id: bytes, partition: int) -> tuple[PartitionLog | None, ErrorCode]:
        info = self.catalog.by_id.get(topic_id)
        if info is None or info.is_internal:
            return None, ErrorCode.UNKNOWN_TOPIC_ID
        if not 0 <= partition < info.num_partitions:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return self.data.served_log(info, partition)

    async def load(self, key: PartitionKey) -> tuple[Served | None, ErrorCode]:
        """The share partition, loaded (or the error its load failed with)."""
        entry = self.served.get(key)
        if entry is not None and entry.sp is not None:
            if entry.plog.closed or not self.data.leads(entry.plog):
                # The topic was deleted or re-created, or (cluster mode) the data
                # partition's lease went: the next leader reads the persisted state.
                self._unload(entry)
            else:
                return entry, ErrorCode.NO_ERROR
        plog, error = self.log_of(key[1], key[2])
        if plog is None:
            return None, error
        entry = self.served.get(key)
        if entry is None:
            entry = self.served[key] = Served(key, plog)
        if entry.loading is None:
            entry.loading = asyncio.get_running_loop().create_future()
            task = asyncio.ensure_future(self._load(entry))
            self.background.add(task)
            task.add_done_callback(self.background.discard)
        fut = entry.loading
        error = await asyncio.shield(fut)
        return (entry, error) if error == ErrorCode.NO_ERROR else (None, error)

    async def _load(self, entry: Served) -> None:
        group_id, topic_id, partition = entry.key
        assert entry.loading is not None
        error = ErrorCode.NO_ERROR
        try:
            entry.leader_epoch = self.data.leader_epoch_of(entry.plog)
            result = await self.state.read_state(
                group_id, topic_id_str(topic_id), partition, entry.leader_epoch
            )
            if result.error != ErrorCode.NO_ERROR:
                error = persister_error(result.error)
            else:
                start: int | None = result.start_offset
                if start == -1:
                    start = self._reset_offset(group_id, entry.plog)
                if start is None:
                    error = ErrorCode.OFFSET_NOT_AVAILABLE
                else:
                    entry.state_epoch = result.state_epoch
                    entry.sp = SharePartition(
                        start,
                        result.batches,
                        delivery_count_limit=self._delivery_count_limit(group_id),
                        max_in_flight=self._max_record_locks(group_id),
                        dlq=self.dead_letters.topic_of(group_id) is not None,
                    )
        except Exception:
            log.exception("loading share partition %s failed", entry.key)
            error = ErrorCode.UNKNOWN
        fut, entry.loading = entry.loading, None
        if error != ErrorCode.NO_ERROR and self.served.get(entry.key) is entry:
            del self.served[entry.key]
        fut.set_result(error)
        if error == ErrorCode.NO_ERROR:
            self._wake(entry)
            self._dead_letter(entry)  # what a crash interrupted

    def _unload(self, entry: Served) -> None:
        if self.served.get(entry.key) is entry:
            del self.served[entry.key]
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        self._wake(entry)

    def loaded(self, key: PartitionKey) -> Served | None:
        entry = self.served.get(key)
        return entry if entry is not None and entry.sp is not None else None

    # -- acquiring
    def acquire(
        self,
        entry: Served,
        member: str,
        max_records: int,
        batch_size: int,
        max_bytes: int,
        record_limit: bool = False,
    ) -> tuple[bytes, list[Acquired]]:
        """Acquire from the log for ``member``: (the raw batches, the acquired ranges)."""
        sp = self._with_configs(entry)
        plog = entry.plog
        if plog.log_start_offset > sp.start_offset:
            sp.log_start_moved(plog.log_start_offset)
        if not sp.can_acquire():
            return b"", []
        offset = sp.fetch_offset()
        committed = self._group_config(entry.key[0], "share.isolation.level") == "read_committed"
        hw = self._visible_end(entry)
        if offset >= hw:
            return b"", []
        try:
            data = plog.read(offset, max(max_bytes, 1), max_offset=hw)
        except OffsetOutOfRangeError:  # retention or DeleteRecords moved the log start
            sp.log_start_moved(plog.log_start_offset)
            return b"", []
        headers = [(h, s, e) for h, s, e in iter_batches(data)]
        spans = [(h.base_offset, h.last_offset, s, e) for h, s, e in headers]
        if not spans:
            return b"", []
        aborted = self._aborted(plog, headers) if committed else frozenset()
        now = self.clock()
        acquired = sp.acquire(
            member,
            [(b, last) for b, last, _, _ in spans],
            max_records,
            batch_size,
            now,
            self.lock_duration_ms(entry.key[0]),
            record_limit=record_limit,
            aborted=aborted,
        )
        if not acquired:
            return b"", []
        lo, hi = acquired[0][0], acquired[-1][1]
        start = next(s for _, last, s, _ in spans if last >= lo)
        end = next(e for b, _, _, e in reversed(spans) if b <= hi)
        self._arm(entry)
        self._event(entry.key, "acquired", sum(last - first + 1 for first, last, _ in acquired))
        return bytes(data[start:end]), acquired

    def available_bytes(self, entry: Served, cap: int) -> int:
        """Bytes a fetch could acquire from now, at most ``cap`` (Kafka's DelayedShareFetch
        measures them against MinBytes before acquiring): from the fetch offset to the high
        watermark (the last stable offset for read_committed), 0 when the window is full."""
        if entry.sp is None:
            return 0
        sp = self._with_configs(entry)
        if not sp.can_acquire():
            return 0
        offset, hw = sp.fetch_offset(), self._visible_end(entry)
        if offset >= hw:
            return 0
        try:
            return min(len(entry.plog.read(offset, max(cap, 1), max_offset=hw)), cap)
        except OffsetOutOfRangeError:
            return 0
        except OSError:
            return cap  # a damaged log: acquiring reports it

    def _visible_end(self, entry: Served) -> int:
        """Where a share fetch stops: the high watermark, the last stable offset for a
        read_committed group."""
        if self._group_config(entry.key[0], "share.isolation.level") == "read_committed":
            return self.data.txn.last_stable_offset(entry.plog)
        return high_watermark(entry.plog)

    def _aborted(
        self, plog: PartitionLog, headers: list[tuple[BatchHeader, int, int]]
    ) -> frozenset[int]:
        """Base offsets of the data batches of aborted transactions among ``headers``."""
        txns = self.data.txn.txns_of(plog)()
        if txns is None or not txns.aborted or not headers:
            return frozenset()
        aborts = txns.aborted_between(headers[0][0].base_offset, headers[-1][0].next_offset)
        return frozenset(
            h.base_offset
            for h, _, _ in headers
            if h.is_transactional
            and not h.is_control
            and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                for a in aborts
            )
        )

    # -- acknowledging
    async def acknowledge(
        self, entry: Served, member: str, batches: Sequence[tuple[int, int, Sequence[int]]]
    ) -> tuple[ErrorCode, str | None]:
        """(the partition's acknowledgement error, Kafka's message for it)."""
        sp = self._with_configs(entry)
        start = sp.start_offset
        error, changes = sp.acknowledge(member, batches)
        if error != ErrorCode.NO_ERROR:
            return error, sp.error_message
        if not changes:
            return error, None
        error = await self._write(entry, changes, start)
        if error != ErrorCode.NO_ERROR:
            released = sp.rollback(changes)
            if released:
                self._persist_later(entry, released, sp.start_offset, dead_letter=True)
            if error == ErrorCode.NOT_LEADER_FOR_PARTITION:
                self._unload(entry)
            return error, None
        sp.commit(changes)
        for b in changes:
            what = _ACK_EVENTS.get(b.delivery_state)
            if what is not None:  # ARCHIVING: counted once archived
                self._event(entry.key, what, b.last_offset - b.first_offset + 1)
        self._wake(entry)
        self._dead_letter(entry)
        return ErrorCode.NO_ERROR, None

    def renew(
        self, entry: Served, member: str, batches: Sequence[tuple[int, int]]
    ) -> tuple[ErrorCode, str | None]:
        sp = entry.sp
        assert sp is not None
        group_id = entry.key[0]
        error = sp.renew(
            member,
            batches,
            self.clock(),
            self.lock_duration_ms(group_id),
            enabled=self.renew_enabled(group_id),
        )
        self._arm(entry)
        return error, sp.error_message

    async def _write(
        self, entry: Served, changes: Sequence[PersisterBatch], start: int
    ) -> ErrorCode:
        sp = entry.sp
        assert sp is not None
        group_id, topic_id, partition = entry.key
        request = WriteRequest(
            partition,
            entry.state_epoch,
            entry.leader_epoch,
            start,
            sp.delivery_complete_count(),
            changes,
        )
        code = await self.state.write_state(group_id, topic_id_str(topic_id), request)
        return ErrorCode.NO_ERROR if code == ErrorCode.NO_ERROR else persister_error(code)

    def _persist_later(
        self,
        entry: Served,
        changes: Sequence[PersisterBatch],
        start: int,
        *,
        dead_letter: bool = False,
    ) -> None:
        """Persist released records; the release stands whatever the write answers.
        ``dead_letter``: then copy what went ARCHIVING to the dead-letter topic."""

        async def write() -> None:
            error = await self._write(entry, changes, start)
            if error != ErrorCode.NO_ERROR:
                log.warning("persisting released records of %s failed: %s", entry.key, error.name)
            if dead_letter:
                self._dead_letter(entry)

        task = asyncio.ensure_future(write())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # -- releasing
    def release_member(self, group_id: str, member: str) -> None:
        """A share session ended: the member's records in the group's partitions go back."""
        for entry in [e for k, e in self.served.items() if k[0] == group_id]:
            if entry.sp is None:
                continue
            sp = self._with_configs(entry)
            start = sp.start_offset
            released = sp.release_member(member)
            if released:
                self._event(
                    entry.key,
                    "member_released",
                    sum(b.last_offset - b.first_offset + 1 for b in released),
                )
                self._persist_later(entry, released, start, dead_letter=True)
                self._wake(entry)

    def partition_released(self, plog: PartitionLog) -> None:
        """This node stopped leading ``plog`` (cluster mode: its lease went). Its share
        partitions are dropped at once, as Kafka's SharePartitionListener drops them when
        the broker stops leading: the records they hold acquired go with them (acquisition
        is never persisted, so the next leader's read finds them available), their lock
        timers stop, and fetches waiting on them answer NOT_LEADER_OR_FOLLOWER."""
        for entry in [e for e in self.served.values() if e.plog is plog]:
            entry.fenced = True
            self._unload(entry)

    def unload_group(self, group_id: str) -> None:
        """The group's last share session here ended: its share partitions are unloaded."""
        for entry in [e for k, e in self.served.items() if k[0] == group_id and e.sp is not None]:
            self._unload(entry)

    def _arm(self, entry: Served) -> None:
        """One loop timer per partition, at its earliest lock deadline."""
        sp = entry.sp
        deadline = sp.next_deadline() if sp is not None else None
        if deadline == entry.timer_at:
            return
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        entry.timer_at = deadline
        if deadline is None:
            return
        delay = max(deadline - self.clock(), 0) / 1000
        entry.timer = asyncio.get_running_loop().call_later(delay, self._expire, entry)

    def _expire(self, entry: Served) -> None:
        entry.timer, entry.timer_at = None, None
        if entry.sp is None or self.served.get(entry.key) is not entry:
            return
        sp = self._with_configs(entry)
        start = sp.start_offset
        released = sp.expire(self.clock())
        if released:
            self._event(
                entry.key, "lock_timeout", sum(b.last_offset - b.first_offset + 1 for b in released)
            )
            self._persist_later(entry, released, start, dead_letter=True)
            self._wake(entry)
        self._arm(entry)

    # -- dead letters
    def _dead_letter(self, entry: Served) -> None:
        """Copy the partition's durable ARCHIVING ranges to the group's dead-letter topic,
        each in a task that archives it after."""
        sp = entry.sp
        if sp is None:
            return
        for dl in sp.take_archiving():
            task = asyncio.ensure_future(self._archive(entry, dl))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _archive(self, entry: Served, dl: DeadLetter) -> None:
        group_id, topic_id, partition = entry.key
        info = self.catalog.by_id.get(topic_id)
        written = False
        if info is not None:
            try:
                written = await self.dead_letters.write(group_id, info, entry.plog, partition, dl)
            except Exception:
                log.exception("writing dead letters of %s failed", entry.key)
        sp = entry.sp
        current = self.served.get(entry.key)
        if sp is None or (current is not None and current is not entry):
            return  # loaded anew meanwhile: that load resumes the range
        # Archived even when the partition was unloaded meanwhile, so the copy is not
        # written again at its next load.
        n = dl.last - dl.first + 1
        if written:
            self._event(entry.key, "dead_lettered", n)
        start = sp.start_offset
        changes = sp.archived(dl.first, dl.last)
        if changes:
            self._event(entry.key, "archived", n)
            self._persist_later(entry, changes, start)
            self._wake(entry)

    # -- waiting for records
    def _wake(self, entry: Served) -> None:
        waiters, entry.waiters = entry.waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, entries: Sequence[Served], timeout_ms: int) -> None:
        """Until records may be acquirable in ``entries`` (an append to their logs, a
        release, a lock timeout) or ``timeout_ms`` passes."""
        if timeout_ms <= 0:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiters = self.data.waiters
        for e in entries:
            e.waiters.add(fut)
            waiters.setdefault(e.plog, set()).add(fut)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await fut
        except TimeoutError:
            pass
        finally:
            for e in entries:
                e.waiters.discard(fut)
                ws = waiters.get(e.plog)
                if ws is not None:
                    ws.discard(fut)
                    if not ws:
                        del waiters[e.plog]

    def _event(self, key: PartitionKey, what: str, n: int) -> None:
        for hook in self.on_event:
            hook(key, what, n)

    async def close(self) -> None:
        if self.partition_released in self.data.on_release:
            self.data.on_release.remove(self.partition_released)
        for entry in list(self.served.values()):
            if entry.timer is not None:
                entry.timer.cancel()
        for task in list(self.background):
            task.cancel()
