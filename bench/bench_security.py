"""Security benchmark (issue 16): what TLS, SASL/SCRAM and ACLs cost on kgc's hot paths.

One run prints one table, each figure the median of ``--rounds`` rounds with every round
listed:

(a) Heartbeat v4 throughput and p99 over SASL_SSL (SCRAM-SHA-512) against PLAINTEXT on the
    same server (target: SASL_SSL at least 70% of PLAINTEXT). G groups x M members join
    over PLAINTEXT, then pipelined heartbeats for them (bench_groups' frames, loadgen's
    generator) go over C connections x D in flight on one listener, then the other,
    alternating. SASL_SSL connections are opened, TLS-wrapped and authenticated before the
    clock runs (``loadgen.run_load(connect=...)``): steady-state cost only.
(b) New SCRAM-SHA-512 connections per second: W workers each connect, authenticate
    (SaslHandshake + two SaslAuthenticate rounds) and close, in a loop, over SASL_SSL (TLS
    handshake included) and over SASL_PLAINTEXT (SCRAM alone), with the p99 time to an
    authenticated connection. The client keeps its salted password across connections
    (``aioclient``), so the figure is the server's work, not the client's PBKDF2.
(c) Heartbeat cost of authorization: the same heartbeat load against two servers started
    alike, one with the StandardAuthorizer and 1,000 ACLs (the members' group ACLs among
    bindings for other users, prefixed patterns, and DENY entries for other hosts), one
    without an authorizer (target: under 10% slower).

Every process (three kgc servers, the load generator) shares the machine; the rounds
alternate the two sides of each comparison so drifting background load hits both. The
generator runs on uvloop when it is installed (as ``kgc serve`` does), so its own TLS is
not what is measured.

Usage: ``python bench/bench_security.py [--groups 100] [--per-group 10] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import checkout  # noqa: F401  (puts this checkout and tests/ on the import path)
from aioclient import AsyncConn, Security, open_stream
from bench_groups import HOST, heartbeat_frames, setup_groups
from loadgen import LoadResult, run_load
from results import record
from support.certkit import make_pki
from support.kgc_process import KgcProcess, free_port

from coordinator.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.acl_store import LocalAclStore
from protocol.errors import ErrorCode
from protocol.messages import heartbeat

USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# -- the servers


def add_user(data: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "coordinator", "users", "add", "--data-dir", str(data),
         "--mechanism", MECHANISM, "--password", PASSWORD, USER],
        check=True,
        capture_output=True,
    )  # fmt: skip


def bench_acls(groups: int, total: int) -> list[AclBinding]:
    """``total`` bindings: READ for the benchmark's members (PLAINTEXT: User:ANONYMOUS) on
    each heartbeat group, DESCRIBE on the start-up probes' groups, and the rest for other
    users, prefixed patterns and other hosts, so the index has real work to skip."""
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    lit, pre = PatternType.LITERAL, PatternType.PREFIXED
    g, t = ResourceType.GROUP, ResourceType.TOPIC
    me = "User:ANONYMOUS"
    out = [AclBinding(g, f"hb-{i}", lit, me, "*", AclOperation.READ, allow) for i in range(groups)]
    out.append(AclBinding(g, "probe-", pre, me, "*", AclOperation.DESCRIBE, allow))
    # DENY from hosts the members do not connect from: matched, checked, not applying.
    out += [
        AclBinding(g, f"hb-{i}", lit, me, f"10.1.{i // 250}.{i % 250}", AclOperation.READ, deny)
        for i in range(groups)
    ]
    i = 0
    while len(out) < total:
        user = f"User:team{i}"
        kind = i % 4
        if kind == 0:
            out.append(AclBinding(g, f"team{i}-app", lit, user, "*", AclOperation.READ, allow))
        elif kind == 1:
            out.append(AclBinding(t, f"team{i}.", pre, user, "*", AclOperation.READ, allow))
        elif kind == 2:  # prefixes of many lengths (the index probes each length present)
            out.append(AclBinding(g, "hb-"[: 1 + i % 3] + "x" * (i % 7), pre, user, "*",
                                  AclOperation.DESCRIBE, allow))  # fmt: skip
        else:
            out.append(AclBinding(t, f"team{i}-events", lit, user, "*", AclOperation.WRITE, allow))
        i += 1
    return out[:total]


def start_servers(
    tmp: Path, acls: list[AclBinding]
) -> tuple[KgcProcess, dict[str, int], KgcProcess, KgcProcess, ssl.SSLContext]:
    pki = make_pki(tmp / "pki")
    common = ("--group-initial-rebalance-delay-ms", "0", "--kgc-log-level", "WARNING")
    # (a)/(b): PLAINTEXT, SASL_SSL and SASL_PLAINTEXT on one server, no authorizer.
    data = tmp / "secure"
    add_user(data)
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    secure = KgcProcess(
        data,
        "--listeners",
        ",".join(f"{name}://{HOST}:{port}" for name, port in ports.items()),
        "--ssl-keystore-type",
        "PEM",
        "--ssl-keystore-location",
        str(pki.server),
        "--sasl-enabled-mechanisms",
        MECHANISM,
        *common,
        port=ports["PLAINTEXT"],
    )
    # (c): the same server twice, with and without the authorizer and its ACLs.
    authz_data = tmp / "authz"
    store = LocalAclStore(authz_data)
    asyncio.run(store.create(acls))
    authz = KgcProcess(
        authz_data,
        "--authorizer-class-name",
        AUTHORIZER,
        "--super-users",
        "User:admin",
        *common,
    )
    plain = KgcProcess(tmp / "plain", *common)
    for proc in (secure, authz, plain):
        proc.start()
        proc.wait_loaded()
    return secure, ports, authz, plain, ssl.create_default_context(cafile=str(pki.ca))


# -- the measurements


async def check_heartbeats(
    port: int, members: list[tuple[str, int, str]], security: Security | None = None
) -> None:
    """The members are still in their groups (the load was real heartbeats, not errors)."""
    conn = await AsyncConn.open(HOST, port, "check", security)
    try:
        for group, generation, member in (members[0], members[-1]):
            r = await conn.call(
                heartbeat.API_KEY,
                4,
                heartbeat.Request(group_id=group, generation_id=generation, member_id=member),
            )
            if r.error_code:
                raise RuntimeError(f"heartbeat for {member} in {group}: error {r.error_code}")
    finally:
        await conn.close()


async def expect_denied(port: int) -> None:
    """The authorizer is on: a group without an ACL is refused."""
    conn = await AsyncConn.open(HOST, port, "check")
    try:
        r = await conn.call(
            heartbeat.API_KEY,
            4,
            heartbeat.Request(group_id="no-acl", generation_id=1, member_id="m"),
        )
        if r.error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED:
            raise RuntimeError(f"expected GROUP_AUTHORIZATION_FAILED, got {r.error_code}")
    finally:
        await conn.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def heartbeat_load(
    proc: KgcProcess,
    port: int,
    frames: list[bytes],
    args: argparse.Namespace,
    security: Security | None = None,
) -> tuple[LoadResult, float]:
    """The load's result and the server's CPU time per answered request (µs), over the
    measured window (connection set-up and warm-up excluded)."""
    connect: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] | None
    connect = None if security is None else (lambda: open_stream(HOST, port, security))
    assert proc.proc is not None
    pid = proc.proc.pid
    cpu0 = [0.0]
    result = run(
        run_load(
            HOST,
            port,
            lambda i: frames[i % len(frames)],
            connections=args.connections,
            depth=args.depth,
            seconds=args.seconds,
            connect=connect,
            on_start=lambda: cpu0.__setitem__(0, cpu_seconds(pid)),
        )
    )
    return result, (cpu_seconds(pid) - cpu0[0]) / result.requests * 1e6


async def connection_rate(
    proc: KgcProcess, port: int, security: Security, workers: int, seconds: float
) -> tuple[float, float, float]:
    """New authenticated connections per second, the p99 time to one (ms) and the server's
    CPU time per connection (µs)."""
    assert proc.proc is not None
    setup_ms: list[float] = []
    cpu0 = cpu_seconds(proc.proc.pid)
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            _, writer = await open_stream(HOST, port, security)
            setup_ms.append((time.perf_counter() - t0) * 1000)
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = time.perf_counter() - start
    cpu_us = (cpu_seconds(proc.proc.pid) - cpu0) / max(len(setup_ms), 1) * 1e6
    return len(setup_ms) / elapsed, pct(setup_ms, 99), cpu_us


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


# -- the table


class Row:
    def __init__(self, label: str, unit: str) -> None:
        self.label, self.unit = label, unit
        self.rates: list[float] = []
        self.p99s: list[float] = []
        self.cpus: list[float] = []  # the server's CPU µs per request (or connection)

    def add(self, rate: float, p99: float, cpu_us: float) -> None:
        self.rates.append(rate)
        self.p99s.append(p99)
        self.cpus.append(cpu_us)

    def load(self, result: tuple[LoadResult, float]) -> None:
        r, cpu_us = result
        self.add(r.rate, r.pct(99), cpu_us)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")

    @property
    def p99(self) -> float:
        return statistics.median(self.p99s) if self.p99s else float("nan")

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus) if self.cpus else float("nan")

    def line(self, versus: str = "") -> str:
        rounds = ", ".join(
            f"{r:,.0f}/{p:.2f}/{c:.0f}"
            for r, p, c in zip(self.rates, self.p99s, self.cpus, strict=True)
        )
        return (
            f"{self.label:<44} {self.rate:>9,.0f} {self.unit:<6} {self.p99:>7.2f} "
            f"{self.cpu:>8.1f}  {versus:<27} {rounds}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--per-group", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0, help="per heartbeat round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--conn-workers", type=int, default=16)
    ap.add_argument("--conn-seconds", type=float, default=5.0)
    ap.add_argument("--parts", default="abc", help="which measurements: a, b and/or c")
    args = ap.parse_args()

    hb_plain = Row("Heartbeat v4, PLAINTEXT", "req/s")
    hb_sasl = Row(f"Heartbeat v4, SASL_SSL {MECHANISM}", "req/s")
    conn_ssl = Row(f"new connections, SASL_SSL {MECHANISM}", "conn/s")
    conn_sasl = Row(f"new connections, SASL_PLAINTEXT {MECHANISM}", "conn/s")
    hb_noauth = Row("Heartbeat v4, no authorizer", "req/s")
    hb_auth = Row(f"Heartbeat v4, StandardAuthorizer {args.acls:,} ACLs", "req/s")

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        acls = bench_acls(args.groups, args.acls)
        secure, ports, authz, plain, tls = start_servers(tmp, acls)
        sasl_ssl = Security(tls, MECHANISM, USER, PASSWORD)
        sasl_plain = Security(None, MECHANISM, USER, PASSWORD)
        try:
            # (a) the same members, heartbeating over one listener then the other.
            members = run(setup_groups(ports["PLAINTEXT"], args.groups, args.per_group, 0))
            frames = heartbeat_frames(members)
            for _ in range(args.rounds if "a" in args.parts else 0):
                hb_plain.load(heartbeat_load(secure, ports["PLAINTEXT"], frames, args))
                hb_sasl.load(heartbeat_load(secure, ports["SASL_SSL"], frames, args, sasl_ssl))
            run(check_heartbeats(ports["SASL_SSL"], members, sasl_ssl))

            # (b) connection set-up.
            for _ in range(args.rounds if "b" in args.parts else 0):
                for row, port, sec in (
                    (conn_ssl, ports["SASL_SSL"], sasl_ssl),
                    (conn_sasl, ports["SASL_PLAINTEXT"], sasl_plain),
                ):
                    row.add(
                        *run(
                            connection_rate(secure, port, sec, args.conn_workers, args.conn_seconds)
                        )
                    )

            # (c) authorization on the heartbeat path.
            run(expect_denied(authz.port))
            per_server = {
                proc.port: heartbeat_frames(
                    run(setup_groups(proc.port, args.groups, args.per_group, 0))
                )
                for proc in (plain, authz)
            }
            for _ in range(args.rounds if "c" in args.parts else 0):
                for row, proc in ((hb_noauth, plain), (hb_auth, authz)):
                    row.load(heartbeat_load(proc, proc.port, per_server[proc.port], args))
        finally:
            for proc in (secure, authz, plain):
                proc.stop()

    nan = float("nan")
    ratio = hb_sasl.rate / hb_plain.rate if hb_plain.rates else nan
    overhead = 1 - hb_auth.rate / hb_noauth.rate if hb_noauth.rates else nan
    cpu_overhead = hb_auth.cpu / hb_noauth.cpu - 1 if hb_noauth.rates else nan
    print(
        f"\nkgc security benchmark: {os.cpu_count()} CPUs shared by 3 kgc servers and the "
        f"load generator; heartbeats: {args.groups} groups x {args.per_group} members, "
        f"{args.connections} connections x {args.depth} in flight, {args.seconds:g} s per "
        f"round; connections: {args.conn_workers} workers, {args.conn_seconds:g} s per round; "
        f"medians of {args.rounds} rounds (rate, p99 and server CPU each). p99: per request, "
        f"or per connection set-up for new connections; CPU: the server's user+system time "
        f"per request (connection) in the measured window\n"
    )
    print(
        f"{'measure':<44} {'median':>9} {'':<6} {'p99 ms':>7} {'CPU µs':>8}  "
        f"{'vs baseline (target)':<27} every round: rate/p99 ms/CPU µs"
    )
    print(hb_plain.line())
    verdict = "ok" if ratio >= 0.70 else "MISSED"
    print(hb_sasl.line(f"{ratio:.0%} of rate (>= 70%) {verdict}"))
    print(conn_ssl.line())
    print(conn_sasl.line())
    print(hb_noauth.line())
    verdict = "ok" if overhead < 0.10 else "MISSED"
    print(hb_auth.line(f"{overhead:+.1%} rate (< 10%) {verdict}"))
    print(f"{'':<44} {'':>9} {'':<6} {'':>7} {'':>8}  {cpu_overhead:+.1%} server CPU per request")
    for row in (hb_plain, hb_sasl, conn_ssl, conn_sasl, hb_noauth, hb_auth):
        if row.rates:
            record("security", row.label, row.rate, f"{row.unit}", "higher")
            record("security", f"{row.label}, server CPU", row.cpu, "µs", "lower")


if __name__ == "__main__":
    main()
