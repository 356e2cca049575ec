"""The supervisor of a kgc.workers node: starts the workers, restarts them, stops them.

How this works: ``supervise`` is ``kgc serve`` when ``kgc.workers`` > 1. It is one plain
process (no event loop, no threads, so forking it is safe) that

1. takes the data directory's ``.lock`` and keeps it for its whole life (the workers
   inherit the descriptor: the directory stays locked while any of them lives, so no other
   kgc, and no supervisor with another worker count, can start on it);
2. prepares the directory in one process (``prepare``): the topic catalog is reconciled
   with the partition directories (a deletion a crash interrupted is finished, a lost entry
   rebuilt), and when any journal holds files (the last stop was not clean) every log is
   opened and every journal, ``journal`` and ``journal.w*``, replayed into it and the logs
   closed cleanly: after a change of worker count a partition's batches may sit in another
   worker's journal than its new owner's;
3. forks worker i = 0..N-1 (``node.worker_main``) with a socket pair: the worker writes
   ``ready`` once it listens, or ``error <one line>`` when it cannot start, and ``changed``
   after it changed a shared file (the supervisor tells the others to ``poll`` now); the
   supervisor's end closing tells a worker its supervisor is gone (it then stops cleanly);
4. waits on the channels, its children and its signals (``signal.set_wakeup_fd``):

   * every worker ready: one line, the node is up;
   * a worker that cannot start at start-up: the others are stopped and ``kgc serve`` exits
     1 with that worker's line (``WorkerStartError``);
   * a worker that dies later (killed, crashed): started again at once, then with a backoff
     doubling from 0.5 s to 10 s while it keeps dying within 10 s of its start; it replays
     its own journal and partitions as a single process does after a crash. One that
     cannot start 3 times in a row stops the node (exit 1, its line);
   * SIGTERM/SIGINT: SIGTERM to every worker (each stops cleanly: answers sent, logs flushed
     and marked clean), wait for all, exit 0 (1, with a line, if a worker's stop failed).
     Signals during the stop are logged and otherwise ignored, and stay ignored after it.

Metrics: each worker serves its own endpoint at metrics.port + i, not aggregated: a
Prometheus scrape configuration lists the N targets (the worker is the target's instance),
as it lists the brokers of a Kafka cluster.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from coordinator.catalog import CATALOG_FILE, TopicCatalog
from coordinator.cluster.peers import PeerConfigError, PeerSecurity
from coordinator.config import Settings
from coordinator.node.assemble import data_dir_refused, log_config_for
from coordinator.node.reconcile import reconcile
from coordinator.node.workers.layout import worker_nodes
from coordinator.node.workers.worker import CHANGED, ERROR, POLL, READY, worker_main
from storage.local.manager import JOURNAL_DIR, DataDirLock, LogManager

__all__ = ["Supervisor", "WorkerStartError", "WorkerStopError", "prepare", "supervise"]

log = logging.getLogger("kgc.supervisor")

MAX_START_FAILURES = 3  # a worker that cannot start this many times in a row stops the node
STABLE_S = 10.0  # a worker that died sooner than this after its start is crash-looping
BACKOFF_S = 0.5  # the first delay before restarting a crash-looping worker, doubling...
MAX_BACKOFF_S = 10.0  # ...up to this
_STOP = (signal.SIGTERM, signal.SIGINT)
_HANDLED = (*_STOP, signal.SIGCHLD)


class WorkerStartError(OSError):
    """A worker could not start: ``kgc serve`` exits 1 with this one line."""


class WorkerStopError(OSError):
    """A worker's stop failed (its exit status or signal in the line)."""


def leftover_journals(data_dir: Path) -> bool:
    """Whether any journal holds files (only an unclean stop leaves them)."""
    for path in data_dir.glob(f"{JOURNAL_DIR}*"):
        ours = path.name == JOURNAL_DIR or path.name.startswith(f"{JOURNAL_DIR}.w")
        if ours and path.is_dir() and any(p.name.endswith(".jnl") for p in path.iterdir()):
            return True
    return False


def prepare(s: Settings) -> None:
    """Step 2 of the module doc; the caller holds ``.lock``."""
    logs = LogManager(s.data_dir)  # the same lock, held once more by this process
    try:
        catalog = TopicCatalog(s.data_dir / CATALOG_FILE)
        reconcile(catalog, logs)
        if leftover_journals(s.data_dir):
            log.info(
                "the last stop was not clean: replaying every journal into the logs before "
                "starting the workers"
            )
            logs.open_all(functools.partial(log_config_for, s, catalog))
            logs.close_all()
    finally:
        logs.release_lock()


def describe_exit(code: int) -> str:
    """``os.waitstatus_to_exitcode``'s value in words."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


@dataclass(slots=True)
class _Worker:
    index: int
    pid: int = 0
    channel: socket.socket | None = None
    buffer: bytes = b""
    ready: bool = False
    error: str | None = None
    started: float = 0.0
    start_failures: int = 0  # consecutive deaths before it was ready
    quick_deaths: int = 0  # consecutive deaths within STABLE_S of the start
    restart_at: float | None = None


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workers = [_Worker(i) for i in range(settings.kgc_workers)]
        self.stopping = False
        self.up = False  # every worker was ready once
        self.fatal: str | None = None
        self.stop_errors: list[str] = []
        self._signals: list[int] = []
        self._wake_r = self._wake_w = -1

    # -- the whole life
    def run(self) -> None:
        s = self.settings
        try:  # the workers' inter-broker client: refused before anything is touched
            PeerSecurity.from_settings(s)
        except PeerConfigError as exc:
            raise SystemExit(f"kgc: error: invalid setting {exc}") from None
        try:
            s.data_dir.mkdir(parents=True, exist_ok=True)
            lock = DataDirLock.acquire(s.data_dir)
        except OSError as exc:
            raise data_dir_refused(s, exc) from exc
        try:
            prepare(s)
            self._install_signals()
            try:
                log.info("starting %d workers", len(self.workers))
                for w in self.workers:
                    self._spawn(w)
                self._loop()
            finally:
                self._uninstall_signals()
        finally:
            lock.release()
        if self.fatal is not None:
            raise WorkerStartError(self.fatal)
        if self.stop_errors:
            raise WorkerStopError("; ".join(self.stop_errors))
        log.info("kgc stopped")

    def _loop(self) -> None:
        while True:
            self._handle_signals()
            self._reap()
            self._restart_due()
            if self.stopping and not any(w.pid for w in self.workers):
                return
            now = time.monotonic()
            due = [w.restart_at for w in self.workers if w.restart_at is not None]
            timeout = max(0.0, min(due) - now) if due else 1.0
            channels = {w.channel.fileno(): w for w in self.workers if w.channel is not None}
            readable, _, _ = select.select([self._wake_r, *channels], [], [], min(timeout, 1.0))
            for fd in readable:
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 512)
                else:
                    self._read(channels[fd])

    # -- signals
    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in _HANDLED:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _uninstall_signals(self) -> None:
        signal.set_wakeup_fd(-1)
        # As ``process.serve``: a late SIGTERM must not kill the process after "kgc stopped".
        for sig in _STOP:
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1

    def _handle_signals(self) -> None:
        while self._signals:
            sig = self._signals.pop(0)
            if sig not in _STOP:
                continue  # SIGCHLD: only a wake-up, ``_reap`` looks
            if self.stopping:
                log.info("already shutting down")
            else:
                log.info("shutting down %d workers", sum(1 for w in self.workers if w.pid))
                self._stop_all()

    def _stop_all(self) -> None:
        self.stopping = True
        for w in self.workers:
            w.restart_at = None
            if w.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.pid, signal.SIGTERM)

    # -- workers
    def _spawn(self, w: _Worker) -> None:
        parent, child = socket.socketpair()
        # No signal between the fork and the child's own handlers may run this process's
        # handlers in the child; the child starts with the defaults.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(_HANDLED))
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            parent.close()
            child.close()
            raise
        if pid == 0:  # the worker
            code = 1
            try:
                parent.close()
                self._become_worker(old)
                code = worker_main(self.settings, w.index, child)
            except BaseException:
                with contextlib.suppress(BaseException):
                    log.exception("worker %d failed", w.index)
            finally:
                with contextlib.suppress(BaseException):
                    for handler in logging.getLogger().handlers:
                        handler.flush()
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)  # never back into the supervisor's stack
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        child.close()
        parent.setblocking(False)  # the supervisor never waits on one worker
        w.pid, w.channel, w.buffer = pid, parent, b""
        w.ready, w.error, w.restart_at = False, None, None
        w.started = time.monotonic()
        log.info("worker %d started (pid %d)", w.index, pid)

    def _become_worker(self, mask: set[int | signal.Signals]) -> None:
        """In the forked child: nothing of the supervisor's but the data directory lock."""
        signal.set_wakeup_fd(-1)
        for sig in _HANDLED:
            signal.signal(sig, signal.SIG_DFL)
        os.close(self._wake_r)
        os.close(self._wake_w)
        for other in self.workers:
            if other.channel is not None:  # the supervisor's ends of the others' channels
                other.channel.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _read(self, w: _Worker) -> bool:
        """Read what ``w`` said; False when there was nothing (now, or ever again)."""
        assert w.channel is not None
        try:
            data = w.channel.recv(4096)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:  # the worker is gone (or going): ``_reap`` tells how
            w.channel.close()
            w.channel = None
            return False
        w.buffer += data
        while b"\n" in w.buffer:
            line, _, w.buffer = w.buffer.partition(b"\n")
            self._told(w, line + b"\n")
        return True

    def _told(self, w: _Worker, line: bytes) -> None:
        if line == READY:
            w.ready = True
            w.start_failures = 0
            log.info("worker %d (pid %d) is listening", w.index, w.pid)
            if not self.up and all(x.ready for x in self.workers):
                self.up = True
                self._announce()
        elif line.startswith(ERROR):
            w.error = line[len(ERROR) :].decode(errors="replace").strip()
        elif line == CHANGED:
            for other in self.workers:
                if other is not w and other.channel is not None and other.ready:
                    with contextlib.suppress(OSError):  # a hint: its poll catches up anyway
                        other.channel.send(POLL)

    def _announce(self) -> None:
        nodes = worker_nodes(self.settings)
        log.info(
            "kgc listening with %d workers: %s (data in %s)",
            len(nodes),
            ", ".join(f"node {n.node_id} at {n.host}:{n.port}" for n in nodes),
            self.settings.data_dir,
        )

    def _reap(self) -> None:
        for w in self.workers:
            if not w.pid:
                continue
            try:
                pid, status = os.waitpid(w.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = w.pid, 0
            if pid:
                self._exited(w, os.waitstatus_to_exitcode(status))

    def _exited(self, w: _Worker, code: int) -> None:
        while w.channel is not None and self._read(w):
            pass  # its last words (an error line) may still be there
        if w.channel is not None:
            w.channel.close()
            w.channel = None
        pid, w.pid = w.pid, 0
        how = describe_exit(code)
        if self.stopping:
            # Killed by the signal itself: it came before the worker's own handlers were in,
            # when it had opened nothing yet.
            if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                self.stop_errors.append(f"worker {w.index} {how} while stopping")
            return
        if not self.up:
            self.fatal = f"worker {w.index} cannot start: {w.error or how}"
            log.error("%s; stopping the other workers", self.fatal)
            self._stop_all()
            return
        if not w.ready:
            w.start_failures += 1
            if w.start_failures >= MAX_START_FAILURES:
                self.fatal = (
                    f"worker {w.index} cannot start ({w.start_failures} attempts): {w.error or how}"
                )
                log.error("%s; stopping the node", self.fatal)
                self._stop_all()
                return
        now = time.monotonic()
        w.quick_deaths = w.quick_deaths + 1 if now - w.started < STABLE_S else 0
        delay = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (w.quick_deaths - 1)) if w.quick_deaths else 0.0
        log.warning(
            "worker %d (pid %d) %s%s; starting it again%s",
            w.index,
            pid,
            how,
            f" ({w.error})" if w.error else "",
            f" in {delay:.1f} s" if delay else "",
        )
        w.restart_at = now + delay

    def _restart_due(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.restart_at is not None and w.restart_at <= now and not self.stopping:
                self._spawn(w)


def supervise(settings: Settings) -> None:
    """``kgc serve`` with kgc.workers > 1: run the node until SIGTERM/SIGINT (module doc)."""
    Supervisor(settings).run()
