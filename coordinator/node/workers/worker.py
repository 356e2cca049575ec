"""One worker process of a kgc.workers node: a broker that leads its share of the partitions.

How this works: ``Worker`` is the deployment ``assemble`` builds it with (the embedded engine),
with the cluster-mode switches the parts already have for "this node leads some partitions,
not all": the group runtime and the data plane start with nothing (``hosted=False``) and
serve a partition only once it is handed to them (``acquire``), answering every other one
as Kafka answers for a partition another broker leads (NOT_COORDINATOR /
NOT_LEADER_OR_FOLLOWER). ``WorkerPartitions`` does the handing over, from the fixed
ownership rule (``placement.worker_of``) instead of leases:

* at start, the owned partitions' logs are opened (the others' directories are left
  untouched: ``LogManager.open_all`` with ``config_for`` answering None for them), the
  owned offsets partitions are replayed in the background (their groups answer
  COORDINATOR_LOAD_IN_PROGRESS meanwhile) and the owned partitions of every topic served;
* whenever the catalog changes, through this worker or another (``shared.WorkerCatalog``
  reloads it), its ``on_change`` brings the new partitions this worker owns (created
  topics, grown ones) and drops the partitions of deleted topics (the deleting worker
  renamed every directory of the topic, its owners' included, before the catalog forgot
  it, so a crash mid-delete is finished at the next start as on one process; the others
  close their logs when they see the topic gone and tombstone their groups' offsets of it).

The broker's ``WorkerPlacement`` lists every worker, so Metadata names each partition's
owner and FindCoordinator each group's, transactional id's and share state's. The workers
reach each other through the inter-broker client, as a cluster's nodes do:

* the worker's transaction coordinator serves its own ``__transaction_state`` partitions;
  markers go to the other workers' partitions and verification to their coordinators
  (``assemble.route_transactions``);
* its share coordinator serves its own ``__share_group_state`` partitions; its
  share-partition leaders and share groups reach the others' with the share state APIs
  (``share.remote``);
* a group's history left in another worker's partition by a run with another worker count
  is asked of that worker (``runtime.older_history``).

``serve_worker`` runs the worker until SIGTERM/SIGINT or until its supervisor goes away
(its end of the channel closes), and tells the supervisor on that channel when it
listens, or why it could not start (one line).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.apis.topics import Broker
from coordinator.catalog import CATALOG_FILE, TopicInfo
from coordinator.cluster.peers import (
    PeerClient,
    PeerConfigError,
    PeerError,
    PeerSecurity,
    peer_client_id,
)
from coordinator.config import Settings, offsets_log_config, share_state_log_config
from coordinator.dataplane import DataPlane
from coordinator.dataplane.plane import PRODUCER_ID_FILE
from coordinator.group_configs import GROUP_CONFIGS_FILE
from coordinator.history import HISTORY_TOPIC
from coordinator.logs import JsonFormatter
from coordinator.metrics import Metrics
from coordinator.node.assemble import (
    Core,
    Stores,
    assemble,
    lock_data_dir,
    log_config_for,
    route_transactions,
)
from coordinator.node.process import (
    STOP_SIGNALS,
    freeze_when_loaded,
    ignore_stop_signals,
    keep_ignoring_stop_signals,
    tune_gc,
)
from coordinator.node.workers.layout import worker_nodes, worker_settings
from coordinator.node.workers.shared import (
    SharedFiles,
    WorkerAclStore,
    WorkerCatalog,
    WorkerCredentialStore,
    WorkerGroupConfigs,
    shared_producer_ids,
)
from coordinator.placement import Placement, WorkerPlacement, worker_of
from coordinator.runtime import GroupRuntime
from coordinator.runtime import history_writers as writers
from coordinator.runtime.older_history import Unavailable
from coordinator.security.credentials import CREDENTIALS_FILE
from coordinator.share.coordinator import ShareCoordinator
from coordinator.share.remote import RemoteShareState
from coordinator.share.state_shard import SHARE_STATE_TOPIC
from coordinator.txn.records import TRANSACTION_STATE_TOPIC
from protocol.messages import describe_group_history as dgh
from storage.interface import wall_clock_ms
from storage.local.durability import Flusher
from storage.local.log import LogConfig, PartitionLog
from storage.local.manager import LogManager
from storage.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from coordinator.node import Node

__all__ = ["WorkerPartitions", "serve_worker", "start_worker", "worker_main"]

log = logging.getLogger("kgc.workers")

READY = b"ready\n"
ERROR = b"error "
CHANGED = b"changed\n"  # worker -> supervisor: this worker changed a shared file
POLL = b"poll\n"  # supervisor -> worker: another worker did; look now


class StartFailed(Exception):
    """The worker could not start; its supervisor was told why (one line)."""


class WorkerPartitions:
    """The partitions worker ``index`` of ``count`` owns: opened, served, dropped (module doc)."""

    def __init__(
        self,
        settings: Settings,
        index: int,
        count: int,
        catalog: WorkerCatalog,
        logs: LogManager,
    ) -> None:
        self.settings = settings
        self.index = index
        self.count = count
        self.catalog = catalog
        self.logs = logs
        self.groups: GroupRuntime | None = None
        self.data: DataPlane | None = None
        self.metrics: Metrics | None = None
        # Topic partitions served here, with the topic id they were opened for.
        self.hosted: dict[tuple[str, int], tuple[bytes, PartitionLog]] = {}

    def owns(self, topic: str, partition: int) -> bool:
        return worker_of(topic, partition, self.count) == self.index

    def config_for(self, topic: str, partition: int) -> LogConfig | None:
        """``LogManager.open_all``'s filter: only this worker's partitions are opened."""
        if not self.owns(topic, partition):
            return None
        return log_config_for(self.settings, self.catalog, topic, partition)

    def owned(self, topic: str, num_partitions: int) -> list[int]:
        """The partitions of a coordinator's topic this worker leads."""
        return [p for p in range(num_partitions) if self.owns(topic, p)]

    def offsets_partitions(self) -> list[int]:
        return self.owned(OFFSETS_TOPIC, self.settings.offsets_topic_num_partitions)

    def attach(self, groups: GroupRuntime, data: DataPlane, metrics: Metrics) -> None:
        """Serve: every owned offsets partition starts loading, every owned topic partition
        is served, and catalog changes are followed from now on."""
        self.groups, self.data, self.metrics = groups, data, metrics
        cfg = offsets_log_config(self.settings)
        owned = {
            p: self.logs.get_or_create(OFFSETS_TOPIC, p, cfg) for p in self.offsets_partitions()
        }
        for p in owned:
            groups.begin_acquire(p)  # LOAD_IN_PROGRESS, not NOT_COORDINATOR, until loaded
        task = asyncio.get_running_loop().create_task(self._load(owned), name="kgc-load")
        groups.background.add(task)
        task.add_done_callback(groups.background.discard)
        for info in list(self.catalog.topics.values()):
            self._serve(info)
        self.catalog.on_change.append(self.topics_changed)
        groups.retain_history()

    async def _load(self, owned: dict[int, PartitionLog]) -> None:
        assert self.groups is not None
        started = time.perf_counter()
        total = 0
        try:
            for p, plog in owned.items():
                t0 = time.perf_counter()
                total += await self.groups.acquire(p, plog)
                if self.metrics is not None:
                    self.metrics.partition_loaded(p, time.perf_counter() - t0)
            log.info(
                "loaded %d offsets-log records from %d partitions in %.2f s",
                total,
                len(owned),
                time.perf_counter() - started,
            )
        finally:
            self.groups.loaded.set()

    def _serve(self, info: TopicInfo) -> None:
        assert self.data is not None
        if info.is_internal or info.offline is not None:
            return
        for p in range(info.num_partitions):
            if not self.owns(info.name, p):
                continue
            held = self.hosted.get((info.name, p))
            if held is not None and held[0] == info.topic_id:
                continue
            if held is not None:
                self._drop(info.name, p)
            plog = self.logs.get_or_create(info.name, p, self.data.log_config(info), info.topic_id)
            self.hosted[(info.name, p)] = (info.topic_id, plog)
            self.data.acquire(info, plog, 0)

    def _drop(self, topic: str, partition: int) -> None:
        assert self.data is not None
        _, plog = self.hosted.pop((topic, partition))
        self.data.release(plog)  # parked fetches answer now
        # Closed, its directory removed if it is still there: the deleting worker renamed
        # it away already; a directory this worker made again since (a segment roll
        # between the rename and now) goes too.
        self.logs.forget(topic, partition)

    def topics_changed(self, names: list[str], created: bool) -> None:
        """The catalog's ``on_change``: topics created, grown, or gone (here or elsewhere)."""
        assert self.groups is not None
        for name in names:
            info = self.catalog.get(name)
            gone = [
                key
                for key, (topic_id, _) in self.hosted.items()
                if key[0] == name and (info is None or topic_id != info.topic_id)
            ]
            for key in gone:
                self._drop(*key)
            if info is None or gone:
                # Deleted (perhaps already re-created): the groups coordinated here drop
                # their offsets of it, whichever worker answered the DeleteTopics (on that
                # one the broker does it too; a second time finds nothing).
                self.groups.topic_deleted(name)
            if info is not None:
                self._serve(info)


class Worker:
    """The ``Deployment`` of worker ``index`` of a kgc.workers node (module docstring)."""

    hosted = False

    def __init__(self, node_settings: Settings, s: Settings, index: int) -> None:
        self.node_settings = node_settings  # the node's (every worker's address is derived)
        self.index = index
        self.count = node_settings.kgc_workers
        self.files = SharedFiles(s.data_dir)
        self.partitions: WorkerPartitions | None = None
        self.workers = WorkerPlacement(worker_nodes(node_settings))
        # The inter-broker client to the other workers (transaction markers, verification),
        # checked before anything is opened, as a cluster node's: a listener or mechanism
        # it cannot serve stops start-up with one line.
        try:
            security = PeerSecurity.from_settings(s)
        except PeerConfigError as exc:
            raise SystemExit(f"kgc: error: invalid setting {exc}") from None
        self.peers = PeerClient(
            self.workers.nodes, security, node_id=s.node_id, request_timeout_ms=s.request_timeout_ms
        )

    async def open_stores(self, s: Settings) -> Stores:
        files = self.files
        flusher = Flusher()
        # First: this worker's lock (.lock.w<i>) before anything there is read.
        logs = lock_data_dir(s, flusher, self.index)
        catalog = WorkerCatalog(s.data_dir / CATALOG_FILE, files)
        self.partitions = WorkerPartitions(s, self.index, self.count, catalog, logs)
        return Stores(
            flusher=flusher,
            logs=logs,
            catalog=catalog,
            credentials=WorkerCredentialStore(s.data_dir / CREDENTIALS_FILE, files),
            acls=WorkerAclStore(s.data_dir, files) if s.authorizer_class_name else None,
            group_configs=WorkerGroupConfigs(s, s.data_dir / GROUP_CONFIGS_FILE, files),
            producer_ids=shared_producer_ids(files, s.data_dir / PRODUCER_ID_FILE),
            peers=self.peers,
            closers=[self.peers.close],
        )

    def _partitions(self) -> WorkerPartitions:
        assert self.partitions is not None
        return self.partitions

    def open_logs(self, s: Settings, stores: Stores) -> None:
        stores.logs.open_all(self._partitions().config_for)

    def core_built(self, groups: GroupRuntime) -> None:
        pass  # the owned offsets partitions load once handed over (``serve_partitions``)

    def serve_partitions(self, s: Settings, core: Core) -> None:
        partitions = self._partitions()
        partitions.attach(core.groups, core.data, core.metrics)
        # The transaction coordinator of this worker's __transaction_state partitions;
        # markers and verification reach the other workers' partitions and ids through
        # the inter-broker client, as between a cluster's nodes.
        route_transactions(s.node_id, core, lambda: self.workers, self.peers)
        older = core.groups.older_history
        if older is not None:
            # A group's history from runs with another worker count: the other workers'.
            older.ask = self._ask_history
            older.holders = functools.partial(
                self._history_holders, s.data_dir, s.offsets_history_retention_ms
            )
            older.worker_client_ids = {
                peer_client_id(node.node_id)
                for node in self.workers.nodes()
                if node.node_id != s.node_id
            }
        core.txn.start(partitions.owned(TRANSACTION_STATE_TOPIC, core.txn.num_partitions))
        self._serve_share_state(s, core)

    def _serve_share_state(self, s: Settings, core: Core) -> None:
        """The share coordinator of this worker's ``__share_group_state`` partitions; a key
        another worker's partition holds goes there through its APIs, as in a cluster."""
        share = core.share
        cfg = share_state_log_config(s)
        for p in self._partitions().owned(SHARE_STATE_TOPIC, share.num_partitions):
            plog = core.stores.logs.get_or_create(SHARE_STATE_TOPIC, p, cfg)
            # Each starts before the server listens: its keys wait for its load, never
            # going to another worker meanwhile.
            task = asyncio.ensure_future(self._acquire_share(share, p, plog))
            share.background.add(task)
            task.add_done_callback(share.background.discard)
        share.remote = RemoteShareState(
            self.peers, self._owner_id(SHARE_STATE_TOPIC), s.node_id, leader_of=self._leader_id
        )

    def _history_holders(
        self, data_dir: Path, retention_ms: int, offsets_partition: int
    ) -> Collection[int] | None:
        """The other workers holding a history partition that may hold groups of
        ``offsets_partition`` (``runtime.history_writers``; None: every other one)."""
        try:
            held = writers.holding(data_dir, offsets_partition, wall_clock_ms(), retention_ms)
        except OSError:
            log.exception("reading which worker counts wrote the history failed; asking all")
            return None
        return {worker_of(HISTORY_TOPIC, q, self.count) for q in held} - {self.index}

    async def _ask_history(
        self, request: dgh.Request, which: Collection[int] | None
    ) -> list[dgh.Response]:
        """The answers of workers ``which`` (None: every other one) to ``request``
        (``runtime.older_history``)."""
        base = self.node_settings.node_id
        me = base + self.index
        others = [
            n.node_id
            for n in self.workers.nodes()
            if n.node_id != me and (which is None or n.node_id - base in which)
        ]
        answers = await asyncio.gather(
            *(self.peers.send(n, dgh.API_KEY, 0, request) for n in others),
            return_exceptions=True,
        )
        out: list[dgh.Response] = []
        for node_id, answer in zip(others, answers, strict=True):
            if isinstance(answer, PeerError):
                worker = node_id - self.node_settings.node_id
                raise Unavailable(f"worker {worker} did not answer: {answer}")
            if isinstance(answer, BaseException):
                raise answer
            out.append(answer)
        return out

    @staticmethod
    async def _acquire_share(share: ShareCoordinator, p: int, plog: PartitionLog) -> None:
        await share.acquire(p, plog)

    def _owner_id(self, topic: str) -> Callable[[int], int]:
        return lambda p: self._leader_id(topic, p)

    def _leader_id(self, topic: str, partition: int) -> int:
        owner = self.workers.owner(topic, partition)
        assert owner is not None  # every partition has its worker
        return owner.node_id

    def placement(
        self, s: Settings, core: Core, endpoints: dict[str, tuple[str, int]], port: int
    ) -> tuple[Placement | None, int]:
        return self.workers, s.advertised_port or port

    def broker_nodes(self, broker: Broker) -> Callable[[], list[int]] | None:
        return None  # DescribeConfigs answers for this worker's broker only

    async def started(self, s: Settings, core: Core) -> None:
        self.files.start()

    def announce(self, s: Settings, listeners: str) -> None:
        log.info(
            "worker %d of %d listening on %s (node %d, data in %s)",
            self.index,
            self.count,
            listeners,
            s.node_id,
            s.data_dir,
        )

    def membership(self) -> None:
        return None


async def start_worker(settings: Settings, index: int) -> tuple[Node, SharedFiles]:
    """Worker ``index`` of ``settings.kgc_workers``, listening; ``settings`` are the node's
    (this worker's own are derived here, ``layout.worker_settings``)."""
    worker = Worker(settings, worker_settings(settings, index), index)
    node = await assemble(worker_settings(settings, index), worker)
    return node, worker.files


def failure_line(exc: BaseException) -> str:
    """What a worker that could not start tells its supervisor: one line."""
    if isinstance(exc, SystemExit):
        text = str(exc.code) if isinstance(exc.code, str) else f"exit status {exc.code}"
    elif isinstance(exc, OSError):
        text = str(exc)
    else:
        text = repr(exc)
    return " ".join(text.split())


async def serve_worker(settings: Settings, index: int, channel: socket.socket) -> None:
    """Run worker ``index`` until SIGTERM/SIGINT or its supervisor's end of ``channel``
    closes, then stop cleanly (``process.serve``'s rules for signals during start and stop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    tune_gc()  # as a single-process node collects: process.GC_THRESHOLDS, then a freeze
    try:
        node, files = await start_worker(settings, index)
    except BaseException as exc:
        log.debug("worker %d could not start", index, exc_info=True)
        channel.sendall(ERROR + failure_line(exc).encode(errors="replace") + b"\n")
        raise StartFailed(failure_line(exc)) from exc
    channel.sendall(READY)
    channel.setblocking(False)

    def changed() -> None:
        with contextlib.suppress(OSError):  # a hint only (shared.py): the poll catches up
            channel.send(CHANGED)

    files.on_changed = changed

    def supervisor_said() -> None:
        try:
            data = channel.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the supervisor is gone: nobody would restart or stop this worker
            log.warning("worker %d: the supervisor went away; stopping", index)
            loop.remove_reader(channel.fileno())
            stop.set()
        elif POLL in data:
            files.poll()

    loop.add_reader(channel.fileno(), supervisor_said)
    freezing = asyncio.ensure_future(freeze_when_loaded(node.groups))
    await stop.wait()
    freezing.cancel()
    log.info("worker %d shutting down", index)
    ignore_stop_signals(loop)
    try:
        await files.stop()  # no reload while the parts stop
        await node.stop()
    finally:
        keep_ignoring_stop_signals(loop)


class _WorkerFormatter(logging.Formatter):
    """The node's log format with the worker named: ``kgc.groups[w1]`` in text lines, a
    ``worker`` field in JSON lines."""

    def __init__(self, inner: logging.Formatter, index: int) -> None:
        super().__init__()
        self.inner = inner
        self.index = index

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(self.inner, JsonFormatter):
            record.worker = self.index
            return self.inner.format(record)
        name = record.name
        record.name = f"{name}[w{self.index}]"
        try:
            return self.inner.format(record)
        finally:
            record.name = name


def tag_logging(index: int) -> None:
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_WorkerFormatter(handler.formatter or logging.Formatter(), index))


def worker_main(settings: Settings, index: int, channel: socket.socket) -> int:
    """The forked worker's body; its exit status (0 after a clean stop)."""
    tag_logging(index)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve_worker(settings, index, channel))
    except StartFailed:
        return 1  # the supervisor reports it
    except BaseException:
        log.exception("worker %d failed", index)
        return 1
    return 0


def lock_holder(data_dir: Path, index: int) -> int | None:
    """The pid written in worker ``index``'s lock file (tests find a worker with it)."""
    try:
        text = (Path(data_dir) / f".lock.w{index}").read_text()
    except OSError:
        return None
    pid = text.split(" ", 1)[0]
    return int(pid) if pid.isdigit() else None
