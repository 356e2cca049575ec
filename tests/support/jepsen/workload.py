"""What every workload shares: the run context, logical threads, coordinators, error classes.

How this works. A ``Ctx`` holds the topology, the history, the run's seeded ``random.Random``
and the deadline. A workload runs logical threads; each ``Thread`` has a process id and
retires it after an ``info`` (an operation that may still take effect must not be followed by
another under the same process, or per-process order would lie): the next id is
``id + stride`` with ``stride`` the number of threads, as Jepsen does.

``Ctx.coordinator(group)`` asks FindCoordinator through a client proxy (the harness's own
addresses only) and returns the advertised address it names, which must be a proxy of this
run. ``classify_commit`` sorts an OffsetCommit error into ``ok``, ``fail`` (the coordinator
validated and refused: no effect) or ``info`` (anything else: unknown, notably
NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE, which Kafka also answers for an append that
timed out and may still commit). A read that did not answer NONE is ``fail`` (it tells
nothing and changed nothing).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocol.errors import ErrorCode
from protocol.messages import create_topics, find_coordinator
from support.jepsen.client import Indefinite, RawClient
from support.jepsen.history import FAIL, INFO, OK, History, Op
from support.jepsen.topology import ProxyTopology

# Refusals after validation, before any write (B5 of the design).
DEFINITE_COMMIT_ERRORS = frozenset(
    {
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.STALE_MEMBER_EPOCH,
        ErrorCode.FENCED_MEMBER_EPOCH,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    }
)
# Errors after which the client looks the coordinator up again.
REDISCOVER = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def classify_commit(code: int) -> str:
    if code == 0:
        return OK
    return FAIL if code in DEFINITE_COMMIT_ERRORS else INFO


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass
class Ctx:
    topology: ProxyTopology
    history: History
    rng: random.Random
    deadline: float = 0.0
    request_timeout: float = 5.0
    _coords: dict[str, tuple[str, int]] = field(default_factory=dict)
    _next_via: int = 0

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def client(self, address: tuple[str, int], name: str) -> RawClient:
        return RawClient(
            *address,
            client_id=f"kgc-jepsen-{name}",
            timeout=self.request_timeout,
            allowed=self.topology.addresses(),
        )

    async def coordinator(self, group: str, fresh: bool = False) -> tuple[str, int] | None:
        """The advertised address of ``group``'s coordinator, or None if none answered."""
        if not fresh and group in self._coords:
            return self._coords[group]
        addresses = sorted(self.topology.addresses())
        for _ in range(len(addresses)):
            self._next_via = (self._next_via + 1) % len(addresses)
            c = self.client(addresses[self._next_via], "find")
            try:
                resp = await c.call(
                    find_coordinator.API_KEY,
                    4,
                    find_coordinator.Request(key_type=0, coordinator_keys=[group]),
                    timeout=2.0,
                )
            except Indefinite:
                continue
            finally:
                c.close()
            (coord,) = resp.coordinators
            if coord.error_code == 0:
                address = (coord.host, coord.port)
                if address not in self.topology.addresses():
                    raise AssertionError(f"{group}'s coordinator at {address}: not a proxy")
                self._coords[group] = address
                return address
        self._coords.pop(group, None)
        return None

    def forget(self, group: str) -> None:
        self._coords.pop(group, None)

    async def create_topic(self, name: str, partitions: int) -> None:
        await create_topic(self.topology, name, partitions)


@dataclass
class Thread:
    """A logical client thread: its current process id, retired after every ``info``."""

    process: int
    stride: int

    def retire(self) -> None:
        self.process += self.stride


class Workload(Protocol):
    name: str

    async def setup(self, ctx: Ctx) -> None: ...

    async def run(self, ctx: Ctx) -> None: ...

    async def final(self, ctx: Ctx) -> None: ...

    def check(self, ops: list[Op]) -> dict[str, Any]: ...


async def pace(ctx: Ctx, seconds: float) -> None:
    """A rate limit between operations (not a wait for a condition)."""
    await asyncio.sleep(seconds * (0.5 + ctx.rng.random()))


async def create_topic(topology: ProxyTopology, name: str, partitions: int) -> None:
    """CreateTopics through a proxy, then wait until every node agrees on its leaders."""
    request = create_topics.Request(
        topics=[
            create_topics.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
        ],
        timeout_ms=30000,
    )
    for address in sorted(topology.addresses()):
        c = RawClient(*address, client_id="kgc-jepsen-admin", allowed=topology.addresses())
        try:
            resp = await c.call(create_topics.API_KEY, 7, request, timeout=30)
        except Indefinite:
            continue
        finally:
            c.close()
        if resp.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            break
    else:
        raise RuntimeError(f"could not create {name}")
    assert topology.cluster is not None
    await asyncio.to_thread(topology.cluster.wait_topic_led, name, 60.0)
