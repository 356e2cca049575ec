"""A pipelined Kafka load generator shared by the benchmarks.

How this works: each connection keeps ``depth`` requests in flight. Requests are encoded
once up front (correlation ids need not be unique for the server; we match responses by
order, as Kafka clients do), so the generator's cost per request is a write and a length
parse, leaving the CPU to the server under test. Latency is measured per request from its
send to its response.

``connect`` (optional) opens each connection instead of a plain TCP one: a TLS-wrapped,
SASL-authenticated stream for secured listeners (``aioclient.open_stream``); the handshake
is done before the connection's first request, outside the measured time. ``on_start``
(optional) is called as the measured window opens. ``before_start`` (optional) is awaited
once the measured window's connections are open, just before the clock starts: several
generator processes use it to wait on a common barrier, so their windows coincide.
``on_response`` (optional) is given each response (the bytes after the size prefix), e.g.
to decode a sample of them and count errors.
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

_I = struct.Struct(">i")
Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def pct(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        lat = sorted(self.latencies_ms)
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")


async def _conn(
    host: str,
    port: int,
    make: Callable[[int], bytes],
    depth: int,
    stop_at: float,
    lat: list[float],
    counter: list[int],
    index: int,
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None,
    on_response: Callable[[bytes], None] | None = None,
) -> None:
    if stream is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = stream
    sent: deque[float] = deque()
    seq = 0

    def send() -> None:
        nonlocal seq
        writer.write(make(index * 1_000_000 + seq))
        seq += 1
        sent.append(time.perf_counter())

    for _ in range(depth):
        send()
    while True:
        size = _I.unpack(await reader.readexactly(4))[0]
        body = await reader.readexactly(size)
        if on_response is not None:
            on_response(body)
        t0 = sent.popleft()
        now = time.perf_counter()
        lat.append((now - t0) * 1000)
        counter[0] += 1
        if now < stop_at:
            send()
        elif not sent:
            break
    writer.close()


async def run_load(
    host: str,
    port: int,
    make: Callable[[int], bytes],
    *,
    connections: int,
    depth: int,
    seconds: float,
    warmup: float = 0.5,
    connect: Connect | None = None,
    on_start: Callable[[], None] | None = None,
    before_start: Callable[[], Awaitable[None]] | None = None,
    on_response: Callable[[bytes], None] | None = None,
) -> LoadResult:
    async def streams() -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
        # With ``connect``, every connection is open (and authenticated) before the clock runs.
        if connect is None:
            return [None] * connections
        return list(await asyncio.gather(*(connect() for _ in range(connections))))

    # Warm up (connections, server caches), then measure.
    if warmup:
        opened = await streams()
        await asyncio.gather(
            *(
                _conn(
                    host,
                    port,
                    make,
                    depth,
                    time.perf_counter() + warmup,
                    [],
                    [0],
                    i,
                    st,
                    on_response,
                )
                for i, st in enumerate(opened)
            )
        )
    opened = await streams()
    lat: list[float] = []
    counter = [0]
    if before_start is not None:
        await before_start()
    if on_start is not None:  # e.g. read the server's CPU time: the measured window begins
        on_start()
    start = time.perf_counter()
    await asyncio.gather(
        *(
            _conn(host, port, make, depth, start + seconds, lat, counter, i, st, on_response)
            for i, st in enumerate(opened)
        )
    )
    return LoadResult(counter[0], time.perf_counter() - start, lat)
