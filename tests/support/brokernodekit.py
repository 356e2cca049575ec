"""The broker of one node in process, over real logs: ``Node`` for the API-layer tests.

How this works: ``Node`` wires the real broker, group runtime and data plane as
``coordinator.node.assemble`` wires them (settings: four offsets partitions, no initial
rebalance delay, and any other given as a keyword), on a ``LogManager`` in ``data_dir`` with its catalog reconciled from the
partition directories, so a second ``Node`` on the same directory is a restart. ``call``
runs one request through the API table's handler (the broker's, the group coordinator's and
the data plane's APIs; no sockets) and awaits a deferred reply;
``close`` stops the data plane, the group core, the flusher and the logs.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from coordinator.apis import Parts, handlers
from coordinator.apis.topics import Broker
from coordinator.catalog import TopicCatalog
from coordinator.config import Settings
from coordinator.dataplane import DataPlane
from coordinator.dataplane.offsets_topic import OffsetsTopic
from coordinator.node.assemble import group_core, log_config_for
from coordinator.node.reconcile import reconcile
from coordinator.server.handler import ClientInfo, Deferred
from protocol.framing import RequestHeader
from storage.local.durability import Flusher
from storage.local.manager import LogManager

CLIENT = ClientInfo("test", "127.0.0.1", 1, 1)


class Node:
    def __init__(self, data_dir: Path, **settings: Any) -> None:
        s = self.settings = Settings(
            data_dir=data_dir,
            offsets_topic_num_partitions=4,
            group_initial_rebalance_delay_ms=0,
            **settings,
        )
        self.flusher = Flusher()
        self.logs = LogManager(data_dir, flusher=self.flusher)
        self.catalog = TopicCatalog(data_dir / "topics.json")
        reconcile(self.catalog, self.logs)
        self.logs.open_all(functools.partial(log_config_for, s, self.catalog))
        _, _, self.groups = group_core(s, self.catalog, self.logs, self.flusher, hosted=True)
        self.offsets = OffsetsTopic(self.groups, s.cluster_id)
        self.data = DataPlane(s, self.catalog, self.logs, self.flusher, offsets_topic=self.offsets)
        self.broker = Broker(
            s, self.catalog, self.logs, self.groups, self.data, advertised_port=9092
        )
        self.h = handlers(Parts(broker=self.broker, groups=self.groups, data=self.data))

    async def call(self, key: int, version: int, body: Any) -> Any:
        res = self.h[key](RequestHeader(key, version, 1, "test"), body, CLIENT)
        if isinstance(res, Deferred):
            res = await res
        return res

    async def close(self) -> None:
        await self.data.stop()
        self.groups.close()
        await self.flusher.stop()
        self.logs.close_all()
