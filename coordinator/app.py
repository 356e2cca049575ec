"""Assembling a running kgc: settings → storage → components → TCP server.

How this works: ``App.start`` opens the data directory (recovering every log), builds the
topic catalog, the group runtime (which replays the offsets log in the background while
answering COORDINATOR_LOAD_IN_PROGRESS) and the data plane, registers their handlers with
the broker and starts listening. A background task runs the log cleaner on compacted logs
in bounded steps. ``App.stop`` is the clean shutdown used on SIGTERM/SIGINT: stop
accepting, let in-flight responses go out, flush and close the logs (which writes the
clean-shutdown markers that let the next start skip recovery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from coordinator import topic_configs
from coordinator.catalog import TopicCatalog
from coordinator.config import Settings, offsets_log_config
from coordinator.dataplane import DataPlane
from coordinator.group.shard import GroupConfig, GroupShard
from coordinator.metrics import Metrics
from coordinator.runtime import GroupRuntime
from coordinator.server.broker import Broker
from coordinator.server.dispatch import Dispatcher
from coordinator.server.listener import KafkaServer
from storage.cleaner import LogCleaner
from storage.durability import Flusher
from storage.log import LogConfig, PartitionLog
from storage.manager import LogManager
from storage.offsets_format import OFFSETS_TOPIC

log = logging.getLogger("kgc")

CLEANER_STEP_BYTES = 1 << 20  # work per step, so a step never holds the loop for long


class App:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.port
        self.server: KafkaServer | None = None
        self.broker: Broker | None = None
        self.flusher = Flusher()
        # First: the LogManager takes the data directory's lock before anything there is read.
        self.logs = LogManager(settings.data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(settings.data_dir / "topics.json")
        self.tasks: list[asyncio.Task[None]] = []
        self.cleaners: dict[PartitionLog, LogCleaner] = {}  # one per compacted log
        self.data: DataPlane | None = None
        self.groups: GroupRuntime | None = None
        self.metrics = Metrics()
        self.metrics_port: int | None = None

    def config_for(self, topic: str, partition: int) -> LogConfig | None:
        """A partition's log settings at start-up; None leaves an offline topic unopened."""
        if topic == OFFSETS_TOPIC:
            return offsets_log_config(self.settings)
        info = self.catalog.get(topic)
        if info is not None and info.offline is not None:
            return None
        return topic_configs.log_config(self.settings, info.configs if info else None)

    def topic_partitions(self, topic: str) -> int | None:
        """Partitions of ``topic``, None if it does not exist (offsets of it are refused)."""
        if topic == OFFSETS_TOPIC:
            return self.settings.offsets_topic_num_partitions
        info = self.catalog.get(topic)
        return info.num_partitions if info is not None else None

    async def start(self) -> None:
        s = self.settings
        # The data directory is locked (LogManager); before any log is opened, recovered or
        # removed, the catalog and the partition directories must agree.
        self.catalog.reconcile(self.logs)
        self.logs.open_all(self.config_for)
        self.flusher.start()
        self.broker = broker = Broker(s, self.catalog)
        self._start_components(broker)
        if broker.groups is not None and broker.groups.metrics is None:
            broker.groups.metrics = self.metrics  # load times, rebalance durations
        self.metrics.bind(
            shard=getattr(broker.groups, "shard", None),
            logs=self.logs,
            flusher=self.flusher,
            cleaners=self.cleaners.values,
        )
        assert self.groups is not None and self.data is not None
        self.server = KafkaServer(
            Dispatcher(broker.handlers(), self.groups.handlers(), self.data.handlers()),
            max_request_size=s.socket_request_max_bytes,
            queued_max_requests=s.queued_max_requests,
            queued_max_request_bytes=s.queued_max_request_bytes,
            on_refused=self.metrics.on_refused,
            # Without an endpoint nobody reads the counters: skip the per-request hook then.
            on_connection=self.metrics.on_connection,
            on_request=self.metrics.on_request if s.metrics_port else None,
        )
        self.port = await self.server.start(s.host, s.port)
        if s.advertised_port is None:
            broker.advertised_port = self.port
        self.tasks.append(asyncio.ensure_future(self._clean_loop()))
        if s.metrics_port:
            self.metrics_port = await self.metrics.serve(s.host, s.metrics_port)
            log.info("metrics on http://%s:%d/metrics", s.host, self.metrics_port)
        log.info(
            "kgc listening on %s:%d (node %d, data in %s)", s.host, self.port, s.node_id, s.data_dir
        )

    def _start_components(self, broker: Broker) -> None:
        """Group runtime and data plane; each registers the APIs it answers."""
        s = self.settings
        shard = GroupShard(
            GroupConfig(
                group_min_session_timeout_ms=s.group_min_session_timeout_ms,
                group_max_session_timeout_ms=s.group_max_session_timeout_ms,
                group_initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                group_max_size=s.group_max_size,
                offsets_topic_num_partitions=s.offsets_topic_num_partitions,
                offset_metadata_max_bytes=s.offset_metadata_max_bytes,
                offsets_retention_minutes=s.offsets_retention_minutes,
                offsets_retention_check_interval_ms=s.offsets_retention_check_interval_ms,
            )
        )
        self.groups = GroupRuntime(
            shard,
            self.logs,
            self.flusher,
            num_partitions=s.offsets_topic_num_partitions,
            log_config=offsets_log_config(s),
            metrics=self.metrics,
            topic_partitions=self.topic_partitions,
        )
        broker.groups = self.groups
        self.groups.start()
        self.data = DataPlane(self.settings, self.catalog, self.logs, self.flusher)
        broker.data = self.data
        self.data.start()

    async def _clean_loop(self) -> None:
        backoff = self.settings.log_cleaner_backoff_ms / 1000
        while True:
            await asyncio.sleep(backoff)
            for gone in [plog for plog in self.cleaners if plog.closed]:
                del self.cleaners[gone]  # a deleted topic's log
            for plog in self.logs.logs():
                if not plog.config.compact or plog.closed:
                    continue
                cleaner = self.cleaners.get(plog)
                if cleaner is None:
                    cleaner = self.cleaners[plog] = LogCleaner(plog)
                try:
                    while cleaner.clean_step(CLEANER_STEP_BYTES):
                        await asyncio.sleep(0)  # let requests through between steps
                except Exception:
                    log.exception("compaction of %s failed; will retry", plog.dir)

    async def stop(self) -> None:
        if self.data is not None:
            self.data.begin_shutdown()  # answer parked fetches so connections drain
        if self.server is not None:
            await self.server.stop()
        await self.metrics.stop()
        if self.data is not None:
            await self.data.stop()
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.groups is not None:
            self.groups.close()
        await self.flusher.stop()
        self.logs.close_all()
        log.info("kgc stopped")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then stop cleanly.

    The handlers go in before anything is opened: once the port accepts connections a
    supervisor may send SIGTERM at any moment, and that must be a clean stop (exit 0), not
    the signal's default action. A signal during start-up lets the start finish, then
    stops. A signal during the stop is logged and otherwise ignored (the flush cannot go
    faster); after the stop the signals stay ignored, because closing the loop would
    restore their default action and a late SIGTERM would then kill the process after
    "kgc stopped".
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    app = App(settings)
    await app.start()
    await stop.wait()
    log.info("shutting down")
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, log.info, "already shutting down")
    try:
        await app.stop()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)


def run(settings: Settings) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(settings))
    else:
        uvloop.run(serve(settings))
