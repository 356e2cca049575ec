"""Server request throughput: pipelined ApiVersions and Metadata over N connections.

Starts ``kgc serve`` in its own process (and, with --compare, a plain asyncio server that
answers with canned bytes: the ceiling for a Python asyncio stack on this machine), drives
each with the pipelined load generator from a second process, and prints requests/s with
p50/p99 latency. Usage: ``python bench/bench_server.py [--seconds 5] [--compare]``.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from loadgen import run_load
from results import record
from support.kgc_process import KgcProcess, free_port

from coordinator.tools.client import Connection
from protocol.framing import RequestHeader, encode_request
from protocol.messages import api_versions, create_topics, metadata

CANNED = textwrap.dedent(
    """
    import asyncio, struct, sys
    try:
        import uvloop
    except ImportError:
        uvloop = None
    RESP = struct.pack(">ii", 4 + 40, 0) + bytes(40)
    class P(asyncio.Protocol):
        def connection_made(self, t):
            self.t = t; self.buf = bytearray()
        def data_received(self, d):
            b = self.buf; b += d; pos = 0; out = []
            while len(b) - pos >= 4:
                n = struct.unpack_from(">i", b, pos)[0]
                if len(b) - pos - 4 < n: break
                cid = b[pos + 8 : pos + 12]
                out.append(RESP[:4] + cid + RESP[8:]); pos += 4 + n
            del b[:pos]
            if out: self.t.write(b"".join(out))
    async def main():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(P, "127.0.0.1", int(sys.argv[1]))
        await srv.serve_forever()
    (uvloop.run if uvloop else asyncio.run)(main())
    """
)


def request_bytes(api_key: int, version: int, body: object) -> bytes:
    return encode_request(RequestHeader(api_key, version, 1, "bench"), body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument(
        "--compare", action="store_true", help="also measure the canned-bytes asyncio ceiling"
    )
    args = ap.parse_args()

    av = request_bytes(
        api_versions.API_KEY,
        3,
        api_versions.Request(client_software_name="bench", client_software_version="1"),
    )
    md = request_bytes(
        metadata.API_KEY,
        12,
        metadata.Request(topics=[metadata.MetadataRequestTopic(name="bench-topic")]),
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        kgc = KgcProcess(Path(tmp) / "data")
        kgc.start()
        try:
            with Connection.to(kgc.bootstrap) as c:
                c.request(
                    create_topics.API_KEY,
                    create_topics.Request(
                        topics=[
                            create_topics.CreatableTopic(
                                name="bench-topic", num_partitions=6, replication_factor=1
                            )
                        ]
                    ),
                )
            for name, payload in (
                ("ApiVersions v3", av),
                ("Metadata v12 (1 topic, 6 partitions)", md),
            ):
                res = asyncio.run(
                    run_load(
                        "127.0.0.1",
                        kgc.port,
                        lambda i, p=payload: p,
                        connections=args.connections,
                        depth=args.depth,
                        seconds=args.seconds,
                    )
                )
                rows.append(("kgc", name, res))
        finally:
            kgc.stop()
    if args.compare:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-c", CANNED, str(port)])
        time.sleep(1.0)
        try:
            res = asyncio.run(
                run_load(
                    "127.0.0.1",
                    port,
                    lambda i: av,
                    connections=args.connections,
                    depth=args.depth,
                    seconds=args.seconds,
                )
            )
            rows.append(("canned asyncio", "ApiVersions (canned bytes)", res))
        finally:
            proc.terminate()
            proc.wait()
    print(f"\n{args.connections} connections x {args.depth} in flight, {args.seconds:.0f} s each")
    print(f"{'server':<16} {'request':<38} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for server, name, res in rows:
        print(f"{server:<16} {name:<38} {res.rate:>10.0f} {res.p50:>8.2f} {res.pct(99):>8.2f}")
        if server == "kgc":
            record("server", name, res.rate, "req/s", "higher")
    if args.compare:
        ceiling = rows[-1][2].rate
        for _server, name, res in rows[:-1]:
            print(f"ratio {name}: {res.rate / ceiling:.2f} of the canned ceiling")


if __name__ == "__main__":
    main()
