"""A node's membership in a kgc cluster: registration, heartbeats and partition leases.

How this works
--------------
``Cluster.start()`` opens one dedicated connection (``application_name kgc-node-<id>``; a
slow write round on another connection can never delay a heartbeat), migrates the schema,
makes sure ``__consumer_offsets`` exists, registers (a new broker epoch) and starts the
heartbeat loop. Every ``broker.heartbeat.interval.ms`` one statement refreshes this node's
heartbeat and reads the node rows, the lease table and the catalog version
(``storage.postgres.registry.heartbeat``); then the ownership pass runs on that view:

* Desired owners come from ``ownership.assign`` (rendezvous scores, even quotas, sticky)
  over the live nodes. This node claims (one statement, ``epoch + 1``) the partitions it
  should own whose owner is gone: none, a dead, fenced or stopping node, or an older
  registration of its own. A partition whose owner is another live node is never taken:
  that owner hands it off itself (``on_release``, then the lease is released) when the
  view says another node should have it, so scale-out is cooperative and a dead node's
  partitions move only once its session expired on the database clock.
* A claimed partition is handed to ``on_acquire(lease)`` (the node loads it); ``owns``
  is true once that returned. At most ``max_concurrent_loads`` loads run at once, and a
  partition is never in two transitions at a time (a busy partition is skipped by the
  pass until its transition ends).
* A lease that changed under this node (another owner, another epoch, the topic deleted)
  is lost: ``on_release`` is called, and nothing is written.
* Nodes whose session expired are marked fenced (as KRaft's controller does), so they
  must register again before they claim anything.

Liveness versus safety: the epoch in every write (``storage.postgres.journal``) is what
makes a stale owner harmless. The local lease deadline is liveness only: if no heartbeat
succeeded within ``session_timeout_ms`` of the moment the last successful one was sent,
this node stops serving everything (``on_release``) before any peer may take over, and
re-claims (new epochs) once heartbeats succeed again; a heartbeat refused because this
registration was fenced makes it register again first. A database outage is logged once
when it starts and once when it ends; the loop retries every interval and never dies.

``stop()`` is the graceful hand-off: mark the node shutting down (peers may claim at
once, without waiting for the session timeout), ``on_release`` everything, release the
leases, close. ``abort()`` is what a crash looks like to peers (tests use it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg

from coordinator.cluster import events as ev
from coordinator.cluster.ownership import assign
from coordinator.placement import parse_endpoints
from storage.interface import Lease
from storage.postgres import catalog, registry, schema
from storage.postgres.registry import HeartbeatView, LeaseRow, NodeIdInUseError

__all__ = ["Cluster", "NodeIdInUseError", "NodeInfo"]

log = logging.getLogger("kgc.cluster")

Key = tuple[str, int]
T = TypeVar("T")
OnAcquire = Callable[[Lease], Awaitable[None]]
OnRelease = Callable[[str, int], Awaitable[None]]
OnCatalogChange = Callable[[], Awaitable[None]]

# What a database that does not answer (or answers with an error) raises through asyncpg.
# Kafka's initial.broker.registration.timeout.ms default: how long start-up keeps trying
# a database that fails (times out, drops the connection) before it gives up.
INITIAL_REGISTRATION_TIMEOUT_MS = 60_000
_DB_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A live node as brokers advertise it (Kafka's Metadata broker entry)."""

    node_id: int
    host: str
    port: int
    rack: str | None
    # (listener name, host, port) of each advertised listener: Metadata and FindCoordinator
    # answer with the endpoint of the listener the request came on.
    endpoints: tuple[tuple[str, str, int], ...] = ()


class Cluster:
    def __init__(
        self,
        url: str,
        node_id: int,
        host: str,
        port: int,
        listeners: str,
        rack: str | None = None,
        *,
        heartbeat_interval_ms: int = 2000,
        session_timeout_ms: int = 9000,
        on_acquire: OnAcquire,
        on_release: OnRelease,
        on_catalog_change: OnCatalogChange | None = None,
        offsets_partitions: int = 50,
        internal_topics: tuple[tuple[str, int, str], ...] = (),
        max_concurrent_loads: int = 4,
        clock: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.url = url
        self._node_id = node_id
        self.host = host
        self.port = port
        self.listeners = listeners
        self.rack = rack
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.offsets_partitions = offsets_partitions
        # Other coordinators' state topics, leased like __consumer_offsets:
        # (name, partitions, the setting that counts them).
        self.internal_topics = internal_topics
        self._on_acquire = on_acquire
        self._on_release = on_release
        self._on_catalog_change = on_catalog_change
        self._clock = clock
        self._incarnation = uuid.uuid4()
        self._broker_epoch = 0
        self._conn: Any = None
        self._conn_lock = asyncio.Lock()  # one statement at a time on the connection
        self._pass_lock = asyncio.Lock()  # one heartbeat + pass at a time
        self._loads = asyncio.Semaphore(max_concurrent_loads)
        # The last view: live nodes and the lease table.
        self._live: dict[int, NodeInfo] = {}
        self._live_epochs: dict[int, int] = {}
        self._leases: dict[Key, LeaseRow] = {}
        self._catalog_version: int | None = None
        self._catalog_task: asyncio.Task[None] | None = None
        self._catalog_again = False
        # Local ownership: leases this node took and has not given back (loading or
        # serving), those whose on_acquire finished, and those in a transition.
        self._held: dict[Key, Lease] = {}
        self._serving: set[Key] = set()
        self._busy: set[Key] = set()
        self._transitions: set[asyncio.Task[None]] = set()
        self._must_register = False
        self._last_ok_sent: int | None = None
        self._deadline_passed = False
        self._outage_since: int | None = None
        self._id_in_use_logged = False
        self._loop_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._signature: object = None
        self.version = 0  # moves whenever nodes, owners or epochs change (Placement)
        self.passes = 0  # ownership passes run (tests count heartbeats with it)

    # ---- read API (sync, from the last view) ----

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def broker_epoch(self) -> int:
        return self._broker_epoch

    def nodes(self) -> list[NodeInfo]:
        """The live nodes (heartbeat within the session timeout, not fenced or stopping)."""
        return [self._live[n] for n in sorted(self._live)]

    def owner(self, topic: str, partition: int) -> NodeInfo | None:
        """The live node holding the partition's lease, or None (no leader right now).

        The holder may still be loading the partition (``owns`` says when this node
        serves it): clients sent here get COORDINATOR_LOAD_IN_PROGRESS and retry, as Kafka.
        """
        key = (topic, partition)
        if key in self._held:
            return self._live.get(self._node_id) or self._me()
        row = self._leases.get(key)
        if row is None or row.owner_node is None:
            return None
        if row.owner_node == self._node_id:
            return None  # held by an older registration of this node: not served
        if self._live_epochs.get(row.owner_node) != row.owner_broker_epoch:
            return None
        return self._live.get(row.owner_node)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's lease epoch (Kafka's leader epoch); -1 when unknown."""
        key = (topic, partition)
        held = self._held.get(key)
        if held is not None:
            return held.epoch
        row = self._leases.get(key)
        return row.epoch if row is not None else -1

    def owns(self, topic: str, partition: int) -> bool:
        """This node holds the lease and ``on_acquire`` finished (it serves the partition)."""
        return (topic, partition) in self._serving

    def owned(self) -> set[Key]:
        return set(self._serving)

    def partition_lost(self, topic: str, partition: int) -> None:
        """A write under this node's lease was refused (another node holds it now).

        Stops serving the partition at once, without waiting for the next heartbeat to
        show the new owner: ``on_release`` runs through the usual transition (so a later
        re-acquisition never overlaps it) and nothing is written to the database.
        """
        key = (topic, partition)
        lease = self._held.pop(key, None)
        if lease is None:
            return
        self._emit(ev.PartitionLost(topic, partition, lease.epoch, "a write was refused"))
        if key in self._serving:
            self._serving.discard(key)
            self._bump_version()
            if key not in self._busy:
                self._start(key, self._local_release(key))
        # still loading: its load task sees the lease gone and releases when it ends

    def lease(self, topic: str, partition: int) -> Lease | None:
        """The lease this node holds for the partition (loading or serving)."""
        return self._held.get((topic, partition))

    def _me(self) -> NodeInfo:
        return NodeInfo(
            self._node_id, self.host, self.port, self.rack, parse_endpoints(self.listeners)
        )

    # ---- lifecycle ----

    async def _connect(self) -> Any:
        return await asyncpg.connect(
            self.url,
            timeout=max(self.session_timeout_ms / 1000, 1.0),
            server_settings={"application_name": f"kgc-node-{self._node_id}"},
        )

    async def start(self) -> None:
        """Connect, migrate, register and run the first ownership pass; then heartbeat.

        Returns once the first pass has started its loads (it does not wait for them).
        Raises ``NodeIdInUseError`` when a live process has this ``node.id``; a database
        failure is tried again for ``INITIAL_REGISTRATION_TIMEOUT_MS`` first.
        """
        deadline = self._clock() + INITIAL_REGISTRATION_TIMEOUT_MS
        while True:
            try:
                conn = await self._connect()
            except _DB_ERRORS as e:
                self._start_failed(e, deadline)
                await asyncio.sleep(self.heartbeat_interval_ms / 1000)
                continue
            try:
                await self._prepare(conn)
            except _DB_ERRORS as e:
                conn.terminate()
                self._start_failed(e, deadline)
                await asyncio.sleep(self.heartbeat_interval_ms / 1000)
                continue
            except BaseException:
                await conn.close()
                raise
            break
        self._conn = conn
        await self.refresh()
        self._loop_task = asyncio.create_task(self._run(), name=f"kgc-cluster-{self._node_id}")
        self._watch_task = asyncio.create_task(
            self._watch_deadline(), name=f"kgc-cluster-deadline-{self._node_id}"
        )

    async def _prepare(self, conn: Any) -> None:
        await schema.migrate(conn)
        await catalog.ensure_offsets_topic(conn, self.offsets_partitions)
        for name, partitions, setting in self.internal_topics:
            await catalog.ensure_internal_topic(conn, name, partitions, setting)
        await self._register_at_start(conn)

    def _start_failed(self, error: BaseException, deadline: int) -> None:
        """A database failure while starting: tried again (a slow or restarting database,
        a timeout on a loaded machine), as Kafka's broker retries its first registration,
        until ``initial.broker.registration.timeout.ms`` has passed; then it stops start-up."""
        if self._clock() >= deadline:
            raise error
        log.warning(
            "node %d: database failed while starting (%s: %s); trying again",
            self._node_id,
            type(error).__name__,
            error,
        )

    async def _register_at_start(self, conn: Any) -> None:
        """Register; when the id is held at this node's own address (this node killed and
        restarted within its session), wait until that session has expired and register
        then, as Kafka's broker retries a DUPLICATE_BROKER_REGISTRATION. A holder that is
        still live after a whole session, or one at another address, is another process
        with this node.id: refused."""
        deadline = self._clock() + self.session_timeout_ms + self.heartbeat_interval_ms
        while True:
            try:
                await self._register(conn)
                return
            except NodeIdInUseError as e:
                if (e.host, e.port) != (self.host, self.port) or self._clock() >= deadline:
                    raise
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)

    async def _register(self, conn: Any) -> None:
        self._broker_epoch = await registry.register(
            conn,
            self._node_id,
            self._incarnation,
            self.host,
            self.port,
            self.listeners,
            self.rack,
            self.session_timeout_ms,
        )
        self._must_register = False
        self._id_in_use_logged = False
        self._emit(ev.NodeRegistered(self._node_id, self._broker_epoch))

    async def stop(self) -> None:
        """Graceful hand-off: finish and release everything, then mark shutting down, close."""
        self._stopping = True
        async with self._pass_lock:  # a pass in progress ends first (never cut mid-claim)
            await self._cancel_loops()
            if self._broker_epoch == 0:  # never registered: nothing to hand off
                await self._close_conn()
                return
            # Loads in progress finish first: on_release then always follows on_acquire.
            while self._transitions:
                await asyncio.gather(*list(self._transitions), return_exceptions=True)
            held = list(self._held.values())
            self._held.clear()
            serving = list(self._serving)
            self._serving.clear()
            await asyncio.gather(*(self._call_release(t, p) for t, p in serving))
            released: set[Key] = set()
            try:
                async with self._conn_lock:
                    conn = await self._connection()
                    released = await self._bounded(
                        registry.release_many(
                            conn,
                            self._node_id,
                            self._broker_epoch,
                            [(x.topic, x.partition, x.epoch) for x in held],
                        )
                    )
            except _DB_ERRORS as e:
                self._in_doubt(e)
                log.warning(
                    "node %d: could not release its leases (%s); peers take over as it "
                    "is shutting down",
                    self._node_id,
                    e,
                )
            for x in held:
                if (x.topic, x.partition) in released:
                    self._emit(ev.PartitionReleased(x.topic, x.partition, x.epoch, "node stopping"))
            # Only now, with every write finished and every lease free, do peers learn that
            # this node is leaving (they take its partitions at their next heartbeat): were
            # it marked first, a peer could claim a partition under a write still in flight
            # here, which the epoch check would then refuse (notes §7.3, step 5).
            try:
                async with self._conn_lock:
                    conn = await self._connection()
                    await self._bounded(
                        registry.mark_shutting_down(conn, self._node_id, self._broker_epoch)
                    )
            except _DB_ERRORS as e:  # peers then wait for the session timeout
                self._in_doubt(e)
                log.warning("node %d: could not mark itself shutting down: %s", self._node_id, e)
            await self._close_conn()
            self._live.clear()
            self._leases.clear()
            self._bump_version()

    async def abort(self) -> None:
        """Stop dead, as a crash would: no callbacks, no release, the connection dropped."""
        self._stopping = True
        await self._cancel_loops()
        for task in list(self._transitions):
            task.cancel()
        await asyncio.gather(*list(self._transitions), return_exceptions=True)
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def _cancel_loops(self) -> None:
        for task in (self._loop_task, self._watch_task, self._catalog_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._loop_task = self._watch_task = self._catalog_task = None

    async def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), timeout=1.0)
            except _DB_ERRORS:
                conn.terminate()

    async def _bounded(self, statement: Awaitable[T]) -> T:
        """A statement on the lease connection, given up after half a session.

        A hung database must not hold the pass (and the connection lock) forever; the
        error path then drops the connection, which is in doubt.
        """
        return await asyncio.wait_for(statement, self.session_timeout_ms / 2000)

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.is_closed():
            self._conn = None
            self._conn = await self._connect()
        return self._conn

    # ---- the heartbeat loop ----

    async def _run(self) -> None:
        interval = self.heartbeat_interval_ms
        next_at = self._clock() + interval
        while True:
            await asyncio.sleep(max(0, next_at - self._clock()) / 1000)
            next_at = max(next_at + interval, self._clock())
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end membership; log it and go on
                log.exception("node %d: heartbeat pass failed", self._node_id)

    async def refresh(self) -> None:
        """One heartbeat and ownership pass, now."""
        if self._stopping:
            return
        async with self._pass_lock:
            view = await self._heartbeat()
            if view is not None:
                await self._pass(view)

    async def _heartbeat(self) -> HeartbeatView | None:
        sent = self._clock()
        # A heartbeat that takes longer than half a session is as good as lost.
        timeout = max(self.session_timeout_ms / 2000, self.heartbeat_interval_ms / 1000)
        try:
            async with self._conn_lock:
                conn = await self._connection()
                if self._must_register:
                    await self._register(conn)
                view = await registry.heartbeat(
                    conn, self._node_id, self._broker_epoch, self.session_timeout_ms, timeout
                )
        except NodeIdInUseError as e:
            if not self._id_in_use_logged:
                log.error("node %d: cannot register again: %s", self._node_id, e)
                self._id_in_use_logged = True
            return None
        except _DB_ERRORS as e:
            self._database_failed(e)
            return None
        self._database_ok()
        if view is None:
            self._emit(ev.NodeFenced(self._node_id, self._broker_epoch, self._node_id))
            self._must_register = True
            self._drop_all("this node was fenced")
            return None
        self._last_ok_sent = sent
        self._deadline_passed = False
        return view

    def _in_doubt(self, error: BaseException) -> None:
        """After a timeout or a broken socket the connection is in doubt: start afresh."""
        if self._conn is not None and not isinstance(error, asyncpg.PostgresError):
            self._conn.terminate()
            self._conn = None

    def _database_failed(self, error: BaseException) -> None:
        self._in_doubt(error)
        if self._outage_since is None:
            self._outage_since = self._clock()
            self._emit(ev.DatabaseUnreachable(self._node_id, f"{type(error).__name__}: {error}"))

    def _database_ok(self) -> None:
        if self._outage_since is not None:
            self._emit(ev.DatabaseBack(self._node_id, self._clock() - self._outage_since))
            self._outage_since = None

    async def _watch_deadline(self) -> None:
        """Stop serving when no heartbeat succeeded within the session timeout (liveness)."""
        while True:
            now = self._clock()
            sent = self._last_ok_sent if self._last_ok_sent is not None else now
            deadline = sent + self.session_timeout_ms
            if now >= deadline and not self._deadline_passed:
                self._deadline_passed = True
                if self._held:
                    self._emit(ev.LeaseDeadlinePassed(self._node_id, len(self._held), now - sent))
                    self._drop_all("lease deadline passed")
                deadline = now + self.heartbeat_interval_ms
            elif now >= deadline:
                deadline = now + self.heartbeat_interval_ms
            await asyncio.sleep(max(deadline - now, 1) / 1000)

    def _drop_all(self, reason: str) -> None:
        """Stop serving everything locally (no database write); leases are re-claimed later."""
        for key, lease in list(self._held.items()):
            del self._held[key]
            if key in self._serving:
                self._serving.discard(key)
                self._emit(ev.PartitionLost(key[0], key[1], lease.epoch, reason))
                self._start(key, self._local_release(key))
            # a partition still loading is released by its load task when it ends
        self._bump_version()

    # ---- the ownership pass ----

    async def _pass(self, view: HeartbeatView) -> None:
        self.passes += 1
        self._apply_view(view)
        me = self._node_id
        current: dict[Key, int] = {}
        for key, lr in self._leases.items():
            if lr.owner_node is not None and self._live_epochs.get(lr.owner_node) == (
                lr.owner_broker_epoch
            ):
                current[key] = lr.owner_node
        desired = assign(self._live, self._leases, current)

        to_claim: list[Key] = []
        to_free: list[tuple[str, int, int]] = []  # leases of mine I do not serve nor want
        for key, lease in list(self._held.items()):
            if key in self._busy:
                continue
            now = self._leases.get(key)
            if now is None or not self._is_mine(now) or now.epoch != lease.epoch:
                reason = "topic deleted" if now is None else f"now held by node {now.owner_node}"
                del self._held[key]
                self._serving.discard(key)
                self._emit(ev.PartitionLost(key[0], key[1], lease.epoch, reason))
                self._start(key, self._local_release(key))
            elif desired.get(key, me) != me:
                self._start(key, self._hand_off(key, lease, f"moving to node {desired[key]}"))
        for key, lr in self._leases.items():
            if key in self._busy or key in self._held:
                continue
            if desired.get(key) == me:
                if lr.owner_node is None or lr.owner_node == me or key not in current:
                    to_claim.append(key)
            elif lr.owner_node == me and lr.owner_broker_epoch is not None:
                to_free.append((key[0], key[1], lr.epoch))

        await self._fence_expired(view)
        if to_free:
            try:
                async with self._conn_lock:
                    conn = await self._connection()
                    # Only rows of this registration: a lease of an older self is taken
                    # over by its desired owner (the claim predicate allows it).
                    await self._bounded(
                        registry.release_many(conn, me, self._broker_epoch, to_free)
                    )
            except _DB_ERRORS as e:  # the next pass tries again
                self._in_doubt(e)
        if to_claim:
            await self._claim(to_claim)
        self._maybe_catalog_changed(view.change_version)

    def _apply_view(self, view: HeartbeatView) -> None:
        self._live = {
            n.node_id: NodeInfo(n.node_id, n.host, n.port, n.rack, parse_endpoints(n.listeners))
            for n in view.nodes
            if n.live
        }
        self._live_epochs = {n.node_id: n.broker_epoch for n in view.nodes if n.live}
        self._leases = {(r.topic, r.partition): r for r in view.leases}
        signature = (
            tuple(sorted(self._live.values(), key=lambda n: n.node_id)),
            tuple((r.topic, r.partition, r.owner_node, r.epoch) for r in view.leases),
        )
        if signature != self._signature:
            self._signature = signature
            self._bump_version()

    def _bump_version(self) -> None:
        self.version += 1

    def _is_mine(self, row: LeaseRow) -> bool:
        return row.owner_node == self._node_id and row.owner_broker_epoch == self._broker_epoch

    async def _fence_expired(self, view: HeartbeatView) -> None:
        if not any(n.expired and not n.fenced and not n.shutting_down for n in view.nodes):
            return
        try:
            async with self._conn_lock:
                conn = await self._connection()
                fenced = await self._bounded(registry.fence_expired(conn, self.session_timeout_ms))
        except _DB_ERRORS as e:
            self._in_doubt(e)
            log.debug("node %d: fencing expired nodes failed: %s", self._node_id, e)
            return
        for node_id, broker_epoch in fenced:
            self._emit(ev.NodeFenced(node_id, broker_epoch, self._node_id))

    async def _claim(self, keys: list[Key]) -> None:
        try:
            async with self._conn_lock:
                conn = await self._connection()
                leases = await self._bounded(
                    registry.claim_many(
                        conn, self._node_id, self._broker_epoch, keys, self.session_timeout_ms
                    )
                )
        except asyncpg.LockNotAvailableError:
            # A writer holds a row (its round is in flight): try again next heartbeat.
            log.debug("node %d: claim waited too long on a lease row", self._node_id)
            return
        except _DB_ERRORS as e:  # the next pass tries again
            self._in_doubt(e)
            log.debug("node %d: claim failed: %s", self._node_id, e)
            return
        for lease in leases:
            key = (lease.topic, lease.partition)
            self._held[key] = lease
            self._start(key, self._acquire(key, lease))
        if leases:
            self._bump_version()

    def _maybe_catalog_changed(self, version: int) -> None:
        if self._catalog_version is None:
            self._catalog_version = version
            return
        if version == self._catalog_version:
            return
        self._catalog_version = version
        if self._on_catalog_change is None:
            return
        if self._catalog_task is not None and not self._catalog_task.done():
            self._catalog_again = True  # coalesced: one more call after the running one
            return
        self._catalog_task = asyncio.create_task(self._notify_catalog())

    async def _notify_catalog(self) -> None:
        assert self._on_catalog_change is not None
        while True:
            self._catalog_again = False
            try:
                await self._on_catalog_change()
            except Exception:
                log.exception("node %d: on_catalog_change failed", self._node_id)
            if not self._catalog_again:
                return

    # ---- transitions (one at a time per partition) ----

    def _start(self, key: Key, work: Awaitable[None]) -> None:
        self._busy.add(key)

        async def run() -> None:
            try:
                await work
            finally:
                self._busy.discard(key)

        task = asyncio.create_task(run())
        self._transitions.add(task)
        task.add_done_callback(self._transitions.discard)

    async def _acquire(self, key: Key, lease: Lease) -> None:
        try:
            async with self._loads:
                await self._on_acquire(lease)
        except Exception:
            log.exception(
                "node %d: loading %s-%d at epoch %d failed; giving the lease back",
                self._node_id,
                key[0],
                key[1],
                lease.epoch,
            )
            if self._held.get(key) is lease:
                del self._held[key]
                await self._release_lease(lease)
            return
        if self._held.get(key) is lease:
            self._serving.add(key)
            self._bump_version()
            self._emit(ev.PartitionAcquired(key[0], key[1], lease.epoch, lease.next_offset))
        else:  # lost or dropped while it loaded: unload at once
            await self._call_release(key[0], key[1])

    async def _hand_off(self, key: Key, lease: Lease, reason: str) -> None:
        # Stop serving first (new requests see NOT_COORDINATOR), let on_release finish the
        # in-flight writes and unload, and only then let the lease go.
        self._serving.discard(key)
        self._bump_version()
        await self._call_release(key[0], key[1])
        if self._held.get(key) is lease:
            del self._held[key]
            if await self._release_lease(lease):
                self._emit(ev.PartitionReleased(key[0], key[1], lease.epoch, reason))

    async def _local_release(self, key: Key) -> None:
        await self._call_release(key[0], key[1])

    async def _call_release(self, topic: str, partition: int) -> None:
        try:
            await self._on_release(topic, partition)
        except Exception:
            log.exception("node %d: on_release of %s-%d failed", self._node_id, topic, partition)

    async def _release_lease(self, lease: Lease) -> bool:
        try:
            async with self._conn_lock:
                conn = await self._connection()
                return await self._bounded(
                    registry.release(
                        conn,
                        self._node_id,
                        self._broker_epoch,
                        lease.topic,
                        lease.partition,
                        lease.epoch,
                    )
                )
        except _DB_ERRORS as e:
            self._in_doubt(e)
            # The row still names this node; the next pass frees it (or a peer takes it
            # over if this node dies meanwhile).
            log.debug("node %d: release of %s failed: %s", self._node_id, lease, e)
            return False

    def _emit(self, event: ev.ClusterEvent) -> None:
        level = logging.WARNING if isinstance(event, ev.DatabaseUnreachable) else logging.INFO
        log.log(level, ev.render(event))
