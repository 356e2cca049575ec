"""Assembling a running kgc: settings → storage → components → TCP server.

How this works: ``App.start`` opens the data directory (recovering every log), builds the
topic catalog, the group runtime (which replays the offsets log in the background while
answering COORDINATOR_LOAD_IN_PROGRESS) and the data plane, registers their handlers with
the broker and starts listening. ``App.stop`` is the clean shutdown used on SIGTERM/SIGINT:
stop accepting, let in-flight responses go out, flush and close the logs (which writes the
clean-shutdown markers that let the next start skip recovery).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from coordinator.broker import Broker
from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.server import KafkaServer

log = logging.getLogger("kgc")


class App:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.port
        self.server: KafkaServer | None = None
        self.broker: Broker | None = None

    async def start(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        catalog = TopicCatalog(s.data_dir / "topics.json")
        self.broker = broker = Broker(s, catalog)
        self.server = KafkaServer(broker.dispatch, broker.supported, max_request_size=s.socket_request_max_bytes)
        self.port = await self.server.start(s.host, s.port)
        if s.advertised_port is None:
            broker.advertised_port = self.port
        log.info("kgc listening on %s:%d (node %d, data in %s)", s.host, self.port, s.node_id, s.data_dir)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        log.info("kgc stopped")


async def serve(settings: Settings) -> None:
    app = App(settings)
    await app.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await app.stop()


def run(settings: Settings) -> None:
    try:
        import uvloop

        uvloop.run(serve(settings))
    except ImportError:
        asyncio.run(serve(settings))
