"""Running one kgc process -- on a data directory, or a cluster node -- until it is told to stop.

How this works: ``run`` starts the event loop (uvloop) on ``serve``, which installs the
stop signals' handlers before anything is opened, assembles the node the settings describe
(``embedded`` on a data directory, ``cluster`` over PostgreSQL), waits for SIGTERM/SIGINT,
and stops the node cleanly (``process`` has the rules for signals during and after a stop).
"""

from __future__ import annotations

import asyncio
import logging

from coordinator.config import Settings
from coordinator.node import Node
from coordinator.node.process import (
    STOP_SIGNALS,
    freeze_when_loaded,
    ignore_stop_signals,
    keep_ignoring_stop_signals,
    tune_gc,
)

log = logging.getLogger("kgc")


async def start(settings: Settings) -> Node:
    """The node ``settings`` describe, built and serving: one process on a data directory,
    or a cluster node over PostgreSQL."""
    if settings.cluster_mode:
        from coordinator.node.cluster import start_cluster_node

        return await start_cluster_node(settings)
    from coordinator.node.embedded import start_embedded

    return await start_embedded(settings)


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then stop cleanly.

    The handlers go in before anything is opened: once the port accepts connections a
    supervisor may send SIGTERM at any moment, and that must be a clean stop (exit 0), not
    the signal's default action. A signal during start-up lets the start finish, then
    stops.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    tune_gc()
    node = await start(settings)
    freezing = asyncio.ensure_future(freeze_when_loaded(node.groups))
    await stop.wait()
    freezing.cancel()
    log.info("shutting down")
    ignore_stop_signals(loop)
    try:
        await node.stop()
    finally:
        keep_ignoring_stop_signals(loop)


def run(settings: Settings) -> None:
    """One kgc process (the CLI's ``serve`` with kgc.workers = 1)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(settings))
    else:
        uvloop.run(serve(settings))
