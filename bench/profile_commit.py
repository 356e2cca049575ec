"""Profile kgc under bench_peer's one-partition commit load with py-spy.

How this works: a fresh ``kgc serve`` is started as ``bench_peer`` starts it (fsync on, empty
data directory, ``--kgc-args`` added), the ``bench`` topic created and the ``commit1``
workload prepared (OffsetCommit v8, 1 partition per request, 100 groups, pipelined over
``--connections`` x ``--depth`` from ``--procs`` generator processes). After a warm-up window,
``py-spy record`` attaches to the server (``--pid``; ``--subprocesses`` so a server of several
processes is sampled whole, ``--threads`` so the event loop and the fsync worker are told
apart, ``--function`` so frames are functions, not lines) in its ``raw`` (collapsed-stack)
format for one measured window, and is stopped with SIGINT, which makes it write its file.
``bench/flamegraph.py`` then draws the SVG and lists the top frames. py-spy pauses the
server for each sample (unless ``--nonblocking``), so the window's figures, printed too, are
a little below an unprofiled run's.

Files: ``OUT/LABEL.collapsed``, ``OUT/LABEL.svg``, ``OUT/LABEL.top.txt`` (default OUT
``profiles``, LABEL ``commit1``); ``--compare OLD.collapsed`` adds a before/after table of
inclusive shares. py-spy is installed into the running interpreter's environment if missing.

Run: ``python bench/profile_commit.py [--seconds 10] [--label before] [--out profiles]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_peer
from flamegraph import compare, read_collapsed, render_svg, top_table
from peerload import Window, run_closed


def py_spy() -> str:
    """The py-spy executable beside this interpreter (pip-installed there if missing)."""
    here = Path(sys.executable).parent / "py-spy"
    if not here.exists() and shutil.which("py-spy") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    return str(here) if here.exists() else str(shutil.which("py-spy"))


def wait_attached(proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    """py-spy says "Sampling process ..." once it is attached and sampling."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"py-spy exited: {log.read_text(errors='replace')}")
        if b"Sampling process" in log.read_bytes():
            return
        time.sleep(0.05)
    raise RuntimeError(f"py-spy did not attach: {log.read_text(errors='replace')}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="profiled window")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--nonblocking", action="store_true", help="py-spy does not pause kgc")
    ap.add_argument("--kgc-args", default="")
    ap.add_argument("--out", type=Path, default=Path("profiles"))
    ap.add_argument("--label", default="commit1")
    ap.add_argument(
        "--workload", default="commit1", help="a bench_peer workload: commit1, heartbeat, ..."
    )
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--compare", type=Path, help="an earlier .collapsed profile")
    args = ap.parse_args()
    # start_server reads these bench_peer options.
    args.tansu_cache = Path(tempfile.gettempdir()) / "kgc-bench-tansu"
    spy = py_spy()
    args.out.mkdir(parents=True, exist_ok=True)
    collapsed = args.out / f"{args.label}.collapsed"
    workdir = Path(tempfile.mkdtemp(prefix="profile-commit-"))
    server = bench_peer.start_server("kgc", args, workdir)
    try:
        asyncio.run(bench_peer.create_topic(server.port))
        cycles = asyncio.run(
            bench_peer.prepare(args.workload, server.port, args.connections)
        ).cycles

        def window(seconds: float) -> Window:
            return run_closed(
                server.port,
                server.pid,
                cycles,
                procs=args.procs,
                depth=args.depth,
                seconds=seconds,
                warmup=0,
            )

        window(args.warmup)
        spy_log = workdir / "py-spy.log"
        cmd = [spy, "record", "--pid", str(server.pid), "--rate", str(args.rate)]
        cmd += ["--format", "raw", "--output", str(collapsed)]
        cmd += ["--function", "--threads", "--subprocesses"]
        if args.nonblocking:
            cmd.append("--nonblocking")
        with open(spy_log, "wb") as log:
            spy_proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_attached(spy_proc, spy_log)
            w = window(args.seconds)
        finally:
            spy_proc.send_signal(signal.SIGINT)
            spy_proc.wait(60)
        if not collapsed.exists():
            raise RuntimeError(f"py-spy wrote nothing: {spy_log.read_text(errors='replace')}")
    except BaseException:
        print(f"--- kgc log (tail) ---\n{server.log()[-4000:]}", file=sys.stderr)
        raise
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    stacks = read_collapsed(collapsed)
    title = (
        f"kgc, {args.workload}, {w.rate:,.0f} req/s under py-spy, "
        f"{w.server_cpu_us_per_request:.0f} us server CPU/request"
    )
    svg = args.out / f"{args.label}.svg"
    svg.write_text(render_svg(stacks, title))
    top = top_table(stacks, args.top)
    if args.compare:
        top += "\n\n" + compare(read_collapsed(args.compare), stacks, args.top)
    (args.out / f"{args.label}.top.txt").write_text(f"{title}\n{top}\n")
    print(
        f"profiled window: {w.rate:,.0f} commits/s, p50 {w.pct(50):.2f} ms, "
        f"p99 {w.pct(99):.2f} ms, server CPU {w.server_cpu_us_per_request:.1f} us/commit "
        f"({w.server_cpu_s / w.seconds * 100:.0f}% of a core), errors {w.errors}/{w.sampled}"
    )
    print(f"wrote {collapsed}, {svg}, {args.out / f'{args.label}.top.txt'}\n")
    print(top)


if __name__ == "__main__":
    main()
