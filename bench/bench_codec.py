"""Codec microbenchmark: the generated straight-line codec on three hot coordinator paths.

Operations (whole frames, as the server sees them):

* decode a Heartbeat v4 request (header v2 + body),
* decode an OffsetCommit v8 request committing 10 partitions of one topic,
* encode a JoinGroup v9 response with 10 members carrying ~100 bytes of metadata each
  (size prefix + response header v1 + body).

Each operation runs ``--runs`` times; a run is a tight loop of N calls, with N chosen so
one run takes about ``--run-time`` seconds. The table shows the median ns/op over the
runs (and the spread, min-max), plus ops/s from the median. ``--compare`` times the
same operations with kafka-python's reflective codec (its message classes'
``decode(..., header=True)`` / ``encode(header=True, framed=True)``) on the same bytes,
and prints the ratio peer/kgc (above 1 means kgc is faster).

Usage: ``python bench/bench_codec.py [--compare] [--runs 7] [--run-time 0.2]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from results import record  # a sibling: bench/ is where this script runs from

from protocol.framing import RequestHeader, decode_request, encode_request, encode_response
from protocol.messages import heartbeat, join_group, offset_commit

# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def _str16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def subscription_metadata(i: int) -> bytes:
    """A ConsumerProtocolSubscription v0 of about 100 bytes."""
    topics = ["orders", "payments", "refunds", "shipments"]
    user_data = f"host=consumer-{i:02d}.svc;zone=b".encode().ljust(52, b"_")
    out = struct.pack(">hi", 0, len(topics)) + b"".join(_str16(t) for t in topics)
    return out + struct.pack(">i", len(user_data)) + user_data


def heartbeat_frame() -> bytes:
    body = heartbeat.HeartbeatRequest(
        group_id="billing-consumers",
        generation_id=17,
        member_id="consumer-1-8c0e0d5e-1f7c-4c55-bd0e-8a9d0c2a7e11",
        group_instance_id=None,
    )
    return encode_request(RequestHeader(heartbeat.API_KEY, 4, 1001, "consumer-1"), body)[4:]


def offset_commit_frame() -> bytes:
    P = offset_commit.OffsetCommitRequestPartition
    body = offset_commit.OffsetCommitRequest(
        group_id="billing-consumers",
        generation_id_or_member_epoch=17,
        member_id="consumer-1-8c0e0d5e-1f7c-4c55-bd0e-8a9d0c2a7e11",
        group_instance_id=None,
        topics=[
            offset_commit.OffsetCommitRequestTopic(
                name="orders",
                partitions=[P(i, 1_000_000 + 1_000 * i, 5, -1, "") for i in range(10)],
            )
        ],
    )
    return encode_request(RequestHeader(offset_commit.API_KEY, 8, 1002, "consumer-1"), body)[4:]


def join_group_response() -> Any:
    M = join_group.JoinGroupResponseMember
    members = [
        M(f"consumer-{i:02d}-8c0e0d5e-1f7c-4c55", None, subscription_metadata(i)) for i in range(10)
    ]
    return join_group.JoinGroupResponse(
        throttle_time_ms=0,
        error_code=0,
        generation_id=17,
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        leader=members[0].member_id,
        skip_assignment=False,
        member_id=members[0].member_id,
        members=members,
    )


# --------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------


@dataclass
class Op:
    name: str
    kgc: Callable[[], Any]
    peer: Callable[[], Any] | None = None
    size: int = 0


def build_ops(compare: bool) -> list[Op]:
    hb = heartbeat_frame()
    oc = offset_commit_frame()
    jg = join_group_response()
    jg_frame = encode_response(join_group.API_KEY, 9, 1003, jg)

    ops = [
        Op("decode Heartbeat v4 request", lambda: decode_request(hb), size=len(hb)),
        Op(
            "decode OffsetCommit v8 request (10 partitions)",
            lambda: decode_request(oc),
            size=len(oc),
        ),
        Op(
            "encode JoinGroup v9 response (10 members x ~100 B)",
            lambda: encode_response(join_group.API_KEY, 9, 1003, jg),
            size=len(jg_frame),
        ),
    ]
    if compare:
        from kafka.protocol.consumer import HeartbeatRequest, JoinGroupResponse, OffsetCommitRequest

        kp_hb, kp_oc = HeartbeatRequest[4], OffsetCommitRequest[8]
        # The peer's response object is obtained by decoding our bytes once (the test
        # suite checks that kafka-python re-encodes them to the identical frame).
        kp_jg = JoinGroupResponse[9].decode(jg_frame, header=True, framed=True)
        kp_jg.with_header(correlation_id=1003)
        assert kp_jg.encode(header=True, framed=True) == jg_frame
        assert kp_hb.decode(hb, header=True).generation_id == 17
        assert len(kp_oc.decode(oc, header=True).topics[0].partitions) == 10
        ops[0].peer = lambda: kp_hb.decode(hb, header=True)
        ops[1].peer = lambda: kp_oc.decode(oc, header=True)
        ops[2].peer = lambda: kp_jg.encode(header=True, framed=True)
    return ops


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def _loop(fn: Callable[[], Any], n: int) -> int:
    perf = time.perf_counter_ns
    it = range(n)
    t0 = perf()
    for _ in it:
        fn()
    return perf() - t0


def measure(fn: Callable[[], Any], runs: int, run_time: float) -> list[float]:
    """ns/op for each run; N is calibrated so a run lasts about ``run_time`` seconds."""
    fn()  # warm up caches (kafka-python compiles its codecs on first use)
    n = 1
    while True:
        elapsed = _loop(fn, n)
        if elapsed >= run_time * 1e9 / 10:
            break
        n *= 2
    n = max(1, int(n * run_time * 1e9 / elapsed))
    out = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            out.append(_loop(fn, n) / n)
    finally:
        if gc_was_enabled:
            gc.enable()
    return out


def fmt_ns(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", action="store_true", help="also time kafka-python's codec")
    ap.add_argument(
        "--runs", type=int, default=7, help="timed runs per operation (median reported)"
    )
    ap.add_argument("--run-time", type=float, default=0.2, help="target seconds per run")
    args = ap.parse_args(argv)

    ops = build_ops(args.compare)
    header = f"{'operation':<52} {'bytes':>6} {'kgc ns/op':>10} {'(min-max)':>15} {'kgc ops/s':>11}"
    if args.compare:
        header += f" {'kafka-python ns/op':>19} {'kp ops/s':>10} {'kp/kgc':>7}"
    print(
        f"Python {sys.version.split()[0]}, {args.runs} runs x ~{args.run_time}s per operation, median shown"
    )
    print(header)
    print("-" * len(header))
    for op in ops:
        ours = measure(op.kgc, args.runs, args.run_time)
        med = statistics.median(ours)
        line = f"{op.name:<52} {op.size:>6} {fmt_ns(med):>10} {f'({fmt_ns(min(ours))}-{fmt_ns(max(ours))})':>15} {1e9 / med:>11,.0f}"
        if args.compare and op.peer is not None:
            theirs = measure(op.peer, args.runs, args.run_time)
            pmed = statistics.median(theirs)
            line += f" {fmt_ns(pmed):>19} {1e9 / pmed:>10,.0f} {pmed / med:>6.1f}x"
        print(line)
        record("codec", op.name, med, "ns/op", "lower")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
