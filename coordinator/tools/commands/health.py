"""``kgc health``: is a server up, and is every partition online?"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from coordinator.tools.admin import AdminError, Unreachable, error_name
from coordinator.tools.commands.common import EXIT_ERROR, EXIT_OK, admin_for, leaf
from coordinator.tools.output import Output


def cmd_health(args: argparse.Namespace) -> int:
    """Healthy: the server answers ApiVersions and Metadata reports no partition offline.

    Partitions are checked through Metadata (every topic, plus ``__consumer_offsets`` asked
    for by name), Kafka's own way of saying a replica's log is unusable: a partition error
    such as LEADER_NOT_AVAILABLE or this node among its ``offline_replicas``. kgc reports so
    a partition whose log holds a corrupt batch or whose offsets could not be loaded.
    """
    out = Output(args)
    t0 = time.perf_counter()
    try:
        with admin_for(args, default_timeout=5.0) as admin:
            apis = admin.api_versions()
            offline: list[str] = []
            for resp in (admin.metadata(None), admin.metadata(["__consumer_offsets"])):
                for t in resp.topics:
                    if t.error_code:  # e.g. no __consumer_offsets yet on a fresh Kafka
                        continue
                    for p in sorted(t.partitions, key=lambda p: p.partition_index):
                        if p.error_code or p.offline_replicas:
                            why = error_name(p.error_code) if p.error_code else "offline replica"
                            entry = f"{t.name}-{p.partition_index} ({why})"
                            if entry not in offline:  # all topics list __consumer_offsets too
                                offline.append(entry)
    except (AdminError, Unreachable) as exc:
        if out.json:
            out.dump(
                {"healthy": False, "bootstrap_server": args.bootstrap_server, "error": str(exc)}
            )
        print(f"kgc: unhealthy: {exc}", file=sys.stderr)
        return EXIT_ERROR  # HEALTHCHECK wants 0 or 1
    ms = (time.perf_counter() - t0) * 1000
    if offline:
        if out.json:
            out.dump(
                {
                    "healthy": False,
                    "bootstrap_server": args.bootstrap_server,
                    "error": "partitions offline",
                    "offline_partitions": offline,
                }
            )
        print(
            f"kgc: unhealthy: {len(offline)} partition(s) offline (damaged log or failed load): "
            + ", ".join(offline),
            file=sys.stderr,
        )
        return EXIT_ERROR
    if out.json:
        out.dump(
            {
                "healthy": True,
                "bootstrap_server": args.bootstrap_server,
                "apis": len(apis),
                "latency_ms": round(ms, 2),
            }
        )
    else:
        print(f"ok: {args.bootstrap_server} answered ApiVersions ({len(apis)} APIs) in {ms:.1f} ms")
    return EXIT_OK


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    leaf(
        common,
        sub,
        "health",
        cmd_health,
        "check that a server answers and no partition is offline; exit 0 healthy, 1 not",
    )
