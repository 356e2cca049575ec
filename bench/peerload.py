"""A multi-process load generator with one synchronised window, and server CPU from /proc.

How this works
--------------
The parent builds, for every connection, a cycle of pre-encoded request frames (the request
kind is in the frame's correlation id, an index into ``KINDS``, so a response can be decoded
without remembering its request). It forks ``procs`` generator processes, each owning every
``procs``-th connection, and each runs on its own event loop (uvloop when installed):

* ``closed`` (``run_closed``): ``loadgen.run_load`` keeps ``depth`` requests in flight per
  connection, as fast as the server answers; the throughput measure.
* ``paced`` (``run_paced``): open loop at a fixed offered rate, split evenly over the
  connections and phase-shifted so the sends interleave; a request's latency runs from the
  instant it was *due* (not from when it went out), so a stalled server cannot hide its
  queueing behind a stalled generator (no coordinated omission).

Every process warms up on its own connections, opens the window's connections, then waits on a
barrier shared with the parent: all windows start at the same instant. The parent reads the
server's CPU time when the barrier releases and again when every generator has drained its last
response (a second barrier), so the server CPU per request covers exactly the requests answered
in the window. The server's CPU time is utime+stime (+ the children it reaped) of the server
process *and its descendants*, read from ``/proc/<pid>/stat``: all threads, and still right
if the server spreads over several processes. Each generator reports its own CPU time
(``time.process_time``) over the window, so a report can show the generator was not the
bottleneck (or that it was). The server's memory is read at the window's end from
``/proc/<pid>/status`` of the same process tree: the resident set (VmRSS) and its peak since
the process started (VmHWM), each summed over the tree. For a JVM, the CPU time of its JIT
compiler threads (``C1/C2 CompilerThread``, /proc/<pid>/task) in the window is read too: near
zero once the JIT has compiled the hot paths, so a window can show it was measured warm.

Every ``sample_every``-th response is decoded and counted as an error if any ``error_code``
in it is nonzero: a rate of error answers is not a rate of work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import multiprocessing as mp
import os
import struct
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import run_load

from protocol.framing import decode_response

HOST = "127.0.0.1"
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_I = struct.Struct(">i")
BARRIER_TIMEOUT_S = 300.0
PACED_LEAD_S = 0.05  # an open loop's first send is due this long after the barrier

# (api_key, api_version) of each request kind; a frame's correlation id is its index here.
KINDS: list[tuple[int, int]] = []


def kind(api_key: int, version: int) -> int:
    """The correlation id that marks requests of this API and version."""
    if (api_key, version) not in KINDS:
        KINDS.append((api_key, version))
    return KINDS.index((api_key, version))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # the process ended between listing and reading
        return None
    # After the parenthesised command name: state is field 3; ppid 4; utime..cstime 14..17.
    return text.rsplit(")", 1)[1].split()


def tree_cpu_seconds(pid: int) -> float:
    """utime+stime+cutime+cstime of ``pid`` and all its descendants, in seconds.

    Counting reaped children's time (cutime/cstime) keeps the sum monotonic when a child
    process exits inside the window: its time moves from its own entry to its parent's.
    """
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None:
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(c for c, pp in parents.items() if pp == p)
    return total / _CLK_TCK


def jit_cpu_seconds(pid: int) -> float:
    """utime+stime of the JIT compiler threads of ``pid`` (a JVM's ``C1 CompilerThre``,
    ``C2 CompilerThre`` tasks), in seconds; 0 for a process without them."""
    ticks = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        if comm.startswith(("C1 CompilerThre", "C2 CompilerThre")):
            ticks += sum(int(x) for x in text.rsplit(")", 1)[1].split()[11:13])
    return ticks / _CLK_TCK


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from each process's ppid in /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            parents[int(entry)] = int(fields[1])
    out = [pid]
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def tree_memory_bytes(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` and all its descendants, summed, in bytes: the resident
    set now and each process's peak resident set (a sum of peaks: an upper bound when the
    processes peaked at different times)."""
    rss = hwm = 0
    for p in _descendants(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm += int(line.split()[1]) * 1024
    return rss, hwm


def has_error(obj: Any) -> bool:
    """True when any ``error_code`` in a decoded response (at any depth) is nonzero."""
    if isinstance(obj, list):
        return any(has_error(x) for x in obj)
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if f.name == "error_code" and v:
                return True
            if (isinstance(v, list) or dataclasses.is_dataclass(v)) and has_error(v):
                return True
    return False


class Sampler:
    """Decodes every ``every``-th response and counts those carrying an error."""

    def __init__(self, kinds: Sequence[tuple[int, int]], every: int) -> None:
        self.kinds = list(kinds)
        self.every = max(1, every)
        self.n = 0
        self.sampled = 0
        self.errors = 0
        self.first_error: str | None = None

    def reset(self) -> None:
        self.sampled = self.errors = 0

    def __call__(self, body: bytes) -> None:
        self.n += 1
        if self.n % self.every:
            return
        self.sampled += 1
        api_key, version = self.kinds[_I.unpack_from(body)[0]]
        resp = decode_response(api_key, version, body)[1]
        if has_error(resp):
            self.errors += 1
            if self.first_error is None:
                self.first_error = repr(resp)[:500]


@dataclass
class Window:
    """One measured window over all generator processes."""

    requests: int
    seconds: float
    latencies_ms: list[float]
    server_cpu_s: float
    loadgen_cpu_s: float
    sampled: int
    errors: int
    first_error: str | None
    offered_rate: float | None = None
    # Open loop only: responses that arrived inside the send window, its length, and how late
    # the generator sent (a late generator, not the server, would explain high latency).
    in_window: int | None = None
    window_s: float | None = None
    send_lag_ms: list[float] = field(default_factory=list)
    # The server's memory at the window's end (``tree_memory_bytes``): resident, and peak.
    server_rss_bytes: int = 0
    server_peak_rss_bytes: int = 0
    server_jit_cpu_s: float = 0.0  # of server_cpu_s: a JVM's JIT compiler threads

    @property
    def rate(self) -> float:
        """Requests answered per second: in the send window for an open loop (the backlog
        drained after it counts only towards CPU per request), else over the whole window."""
        if self.in_window is not None and self.window_s:
            return self.in_window / self.window_s
        return self.requests / self.seconds

    def lag_pct(self, p: float) -> float:
        if not self.send_lag_ms:
            return float("nan")
        return self.send_lag_ms[
            min(len(self.send_lag_ms) - 1, int(p / 100 * len(self.send_lag_ms)))
        ]

    def pct(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        return self.latencies_ms[
            min(len(self.latencies_ms) - 1, int(p / 100 * len(self.latencies_ms)))
        ]

    @property
    def server_cpu_us_per_request(self) -> float:
        return self.server_cpu_s / self.requests * 1e6 if self.requests else float("nan")


def _event_loop_run(coro: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


async def _barrier(b: Any) -> None:
    # mp.Barrier.wait blocks: wait in a thread so the loop keeps its connections alive.
    await asyncio.get_running_loop().run_in_executor(None, b.wait, BARRIER_TIMEOUT_S)


def _closed_child(
    ports: list[int],
    cycles: list[list[bytes]],
    depth: int,
    seconds: float,
    warmup: float,
    kinds: list[tuple[int, int]],
    sample_every: int,
    start: Any,
    end: Any,
    out: Any,
) -> None:
    sampler = Sampler(kinds, sample_every)
    result: dict[str, Any] = {}

    def make(i: int) -> bytes:
        # run_load numbers its requests connection * 1e6 + sequence.
        cycle = cycles[(i // 1_000_000) % len(cycles)]
        return cycle[(i % 1_000_000) % len(cycle)]

    # run_load opens its connections in order (for the warm-up, then again for the window):
    # connection i goes to ports[i], the broker its cycle's requests are for (kgc.workers:
    # each group's coordinator).
    next_port = itertools.cycle(ports)

    async def opened() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(HOST, next(next_port))

    async def main() -> None:
        cpu0 = 0.0

        async def before() -> None:
            nonlocal cpu0
            await _barrier(start)
            sampler.reset()
            cpu0 = time.process_time()

        res = await run_load(
            HOST,
            ports[0],
            make,
            connections=len(cycles),
            depth=depth,
            seconds=seconds,
            warmup=warmup,
            connect=opened,
            before_start=before,
            on_response=sampler,
        )
        result.update(
            requests=res.requests,
            latencies=array("d", res.latencies_ms).tobytes(),
            cpu=time.process_time() - cpu0,
        )

    _run_child(main, result, sampler, start, end, out)


def _run_child(
    main: Callable[[], Coroutine[Any, Any, None]],
    result: dict[str, Any],
    sampler: Sampler,
    start: Any,
    end: Any,
    out: Any,
) -> None:
    try:
        _event_loop_run(main())
        result.update(sampled=sampler.sampled, errors=sampler.errors, first=sampler.first_error)
    except BaseException as exc:  # reported by the parent
        result["failed"] = f"{type(exc).__name__}: {exc}"
        start.abort()  # nobody waits out the barriers' timeouts for a dead generator
        end.abort()
    try:
        end.wait(BARRIER_TIMEOUT_S)
    except threading.BrokenBarrierError:
        pass
    finally:
        out.put(result)


async def _paced_conn(
    port: int,
    cycle: list[bytes],
    interval: float,
    phase: float,
    t_start: float,
    t_stop: float,
    lat: list[float] | None,
    counter: list[int],
    sampler: Sampler,
    lags: list[float] | None = None,
) -> None:
    """Send ``cycle`` round and round, one frame every ``interval`` s from ``t_start +
    phase`` until ``t_stop``; ``counter`` is [answered, answered before t_stop]."""
    reader, writer = await asyncio.open_connection(HOST, port)
    due: deque[float] = deque()
    done_sending = asyncio.Event()

    async def read() -> None:
        while True:
            size = _I.unpack(await reader.readexactly(4))[0]
            sampler(await reader.readexactly(size))
            now = time.perf_counter()
            if lat is not None:
                lat.append((now - due.popleft()) * 1000)
            else:
                due.popleft()
            counter[0] += 1
            if now < t_stop:
                counter[1] += 1
            if done_sending.is_set() and not due:
                return

    reading = asyncio.ensure_future(read())
    k = 0
    n = len(cycle)
    while True:
        t = t_start + phase + k * interval
        if t >= t_stop:
            break
        now = time.perf_counter()
        if t > now:
            await asyncio.sleep(t - now)
            continue
        while t <= now and t < t_stop:  # everything due by now goes out together
            writer.write(cycle[k % n])
            due.append(t)
            if lags is not None:
                lags.append((now - t) * 1000)
            k += 1
            t = t_start + phase + k * interval
    done_sending.set()
    if due:
        await reading
    else:
        reading.cancel()
    writer.close()


def _paced_child(
    ports: list[int],
    cycles: list[list[bytes]],
    proc_index: int,
    procs: int,
    total_connections: int,
    rate: float,
    seconds: float,
    warmup: float,
    kinds: list[tuple[int, int]],
    sample_every: int,
    start: Any,
    end: Any,
    out: Any,
) -> None:
    sampler = Sampler(kinds, sample_every)
    result: dict[str, Any] = {}
    interval = total_connections / rate  # each connection's share of the offered rate

    def phase(i: int) -> float:
        # This process's i-th connection is connection proc_index + i * procs of the whole;
        # each sends 1/total_connections of a period after the one before it, so the sends
        # of all processes interleave evenly.
        return (proc_index + i * procs) * interval / total_connections

    async def main() -> None:
        if warmup:
            t0 = time.perf_counter()
            await asyncio.gather(
                *(
                    _paced_conn(
                        ports[i], c, interval, phase(i), t0, t0 + warmup, None, [0, 0], sampler
                    )
                    for i, c in enumerate(cycles)
                )
            )
        await _barrier(start)
        sampler.reset()
        cpu0 = time.process_time()
        lat: list[float] = []
        lags: list[float] = []
        counter = [0, 0]
        t0 = time.perf_counter() + PACED_LEAD_S  # the connections open meanwhile
        await asyncio.gather(
            *(
                _paced_conn(
                    ports[i], c, interval, phase(i), t0, t0 + seconds, lat, counter, sampler, lags
                )
                for i, c in enumerate(cycles)
            )
        )
        result.update(
            requests=counter[0],
            in_window=counter[1],
            latencies=array("d", lat).tobytes(),
            lags=array("d", lags).tobytes(),
            cpu=time.process_time() - cpu0,
        )

    _run_child(main, result, sampler, start, end, out)


def _run(
    server_pid: int,
    procs: int,
    cycles: list[list[bytes]],
    target: Callable[..., None],
    args_for: Callable[[int, list[list[bytes]]], tuple[Any, ...]],
    offered_rate: float | None = None,
    window_s: float | None = None,
) -> Window:
    procs = max(1, min(procs, len(cycles)))
    ctx = mp.get_context("fork")  # the frames are inherited, not pickled
    start = ctx.Barrier(procs + 1)
    end = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    children = [
        ctx.Process(target=target, args=(*args_for(p, cycles[p::procs]), start, end, out))
        for p in range(procs)
    ]
    for c in children:
        c.start()
    try:
        start.wait(BARRIER_TIMEOUT_S)
        cpu0 = tree_cpu_seconds(server_pid)
        jit0 = jit_cpu_seconds(server_pid)
        t0 = time.perf_counter()
        end.wait(BARRIER_TIMEOUT_S)
        seconds = time.perf_counter() - t0
        cpu1 = tree_cpu_seconds(server_pid)
        jit1 = jit_cpu_seconds(server_pid)
        rss, peak_rss = tree_memory_bytes(server_pid)
        results = [out.get(timeout=BARRIER_TIMEOUT_S) for _ in children]
    except threading.BrokenBarrierError:
        start.abort()
        end.abort()
        results = [out.get(timeout=30) for _ in children]
        failures = [r.get("failed") for r in results if r.get("failed")]
        raise RuntimeError(f"a load generator failed: {failures}") from None
    finally:
        for c in children:
            c.join(30)
    failures = [r["failed"] for r in results if "failed" in r]
    if failures:
        raise RuntimeError(f"a load generator failed: {failures}")

    def merged(key: str) -> list[float]:
        values: list[float] = []
        for r in results:
            a = array("d")
            a.frombytes(r.get(key, b""))
            values.extend(a)
        values.sort()
        return values

    paced = offered_rate is not None
    return Window(
        requests=sum(r["requests"] for r in results),
        seconds=seconds,
        latencies_ms=merged("latencies"),
        server_cpu_s=cpu1 - cpu0,
        loadgen_cpu_s=sum(r["cpu"] for r in results),
        sampled=sum(r["sampled"] for r in results),
        errors=sum(r["errors"] for r in results),
        first_error=next((r["first"] for r in results if r["first"]), None),
        offered_rate=offered_rate,
        in_window=sum(r["in_window"] for r in results) if paced else None,
        window_s=window_s,
        send_lag_ms=merged("lags"),
        server_rss_bytes=rss,
        server_peak_rss_bytes=peak_rss,
        server_jit_cpu_s=jit1 - jit0,
    )


def _ports(port: int | Sequence[int], cycles: list[list[bytes]]) -> list[int]:
    """Each cycle's port: one for all, or one per cycle (several brokers)."""
    ports = [port] * len(cycles) if isinstance(port, int) else list(port)
    assert len(ports) == len(cycles)
    return ports


def run_closed(
    port: int | Sequence[int],
    server_pid: int,
    cycles: list[list[bytes]],
    *,
    procs: int,
    depth: int,
    seconds: float,
    warmup: float = 0.5,
    sample_every: int = 16,
) -> Window:
    """``len(cycles)`` connections, ``depth`` in flight each, spread over ``procs`` processes;
    ``port``: every connection's, or each cycle's (a list as long as ``cycles``)."""
    kinds = list(KINDS)
    ports = _ports(port, cycles)
    procs = max(1, min(procs, len(cycles)))  # as _run deals the cycles
    return _run(
        server_pid,
        procs,
        cycles,
        _closed_child,
        lambda p, share: (ports[p::procs], share, depth, seconds, warmup, kinds, sample_every),
    )


def run_paced(
    port: int | Sequence[int],
    server_pid: int,
    cycles: list[list[bytes]],
    *,
    procs: int,
    rate: float,
    seconds: float,
    warmup: float = 0.5,
    sample_every: int = 16,
) -> Window:
    """Open loop: ``rate`` requests/s in all over ``len(cycles)`` connections."""
    kinds = list(KINDS)
    ports = _ports(port, cycles)
    procs = max(1, min(procs, len(cycles)))
    total = len(cycles)

    def args_for(p: int, share: list[list[bytes]]) -> tuple[Any, ...]:
        return (ports[p::procs], share, p, procs, total, rate, seconds, warmup, kinds, sample_every)

    return _run(
        server_pid, procs, cycles, _paced_child, args_for, offered_rate=rate, window_s=seconds
    )
