"""Share groups' dead letters (KIP-1191): copies of the records a share group gives up on.

How this works (Kafka 4.4's ShareGroupDLQStateManager, in process): a share group whose
``errors.deadletterqueue.topic.name`` group config is set sends every record a consumer
rejects, and every record that reaches the delivery limit, to that topic before archiving
it. The share partition holds such records ARCHIVING (persisted so) and hands their ranges
out (``SharePartition.take_archiving``); ``DeadLetterWriter.write`` copies one range and
returns, and the leader then archives it. Kafka archives regardless when the copy cannot
be written, and so does kgc, after logging why:

* the topic is checked as Kafka checks it, in its order and with its messages: a name
  starting ``__``; an existing topic without ``errors.deadletterqueue.group.enable=true``;
  a missing topic while the broker's ``errors.deadletterqueue.auto.create.topics.enable``
  is false (when it is true the topic is created with the broker's ``num.partitions``,
  ``errors.deadletterqueue.group.enable=true`` and ``message.timestamp.type=CreateTime``);
  a name without the broker's ``errors.deadletterqueue.topic.name.prefix`` (``dlq.``; empty:
  any name).
* One dead letter per offset goes to partition ``source partition % partitions``, in as
  few uncompressed batches as the topic's ``max.message.bytes`` allows, stamped with the
  time of writing. Its headers say where it came from: ``__dlq.errors.topic``,
  ``__dlq.errors.partition``, ``__dlq.errors.offset``, ``__dlq.errors.group``,
  ``__dlq.errors.delivery.count`` and ``__dlq.errors.message`` (why). Its key and value are
  the original record's when the group's ``errors.deadletterqueue.copy.record.enable`` is
  true, else null (an offset no longer in the log gets null ones too); the original
  headers are not copied, as in Kafka.
* A batch is appended as an acks=-1 Produce is, and the write returns once it is durable,
  so a record is archived only after its copy is on disk. A refused append is retried
  after 1, 2, 4 and 8 s (Kafka's five attempts), then given up. In cluster mode a batch
  whose dead-letter partition another node leads goes to that leader as one acks=-1
  Produce through the inter-broker client (``RemoteShareState.produce``); its refusal
  (NOT_LEADER_OR_FOLLOWER after a move) or silence is retried like a local refusal, the
  leader looked up again each time. A missing topic is never created there
  (``create_topic`` is None).
* The copies sent to another node's leader are written as an idempotent producer (one
  producer id for the writer, taken at its first such copy; a sequence per dead-letter
  partition), so a batch sent again after its answer was lost is recognized by the
  partition's leader and not appended twice; those appended here are plain batches.
  Copies to one partition go one at a time, so their sequences arrive in order; a retry
  resends only the batches not yet acknowledged, with their sequences. A copy given up
  after its last attempt may have been written, so the writer takes a new producer id.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable

from coordinator.catalog import TopicCatalog, TopicExistsError, TopicInfo
from coordinator.dataplane import DataPlane
from coordinator.server.handler import ClientInfo, Deferred
from coordinator.share.partition import DeadLetter
from coordinator.share.remote import RemoteShareState
from coordinator.stores import GroupConfigStore
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import produce
from storage.interface import Clock, OffsetOutOfRangeError, PartitionLog, wall_clock_ms
from storage.record_batch import Record, decode_records, encode_batch, iter_batches

log = logging.getLogger("kgc.share.dlq")

TOPIC_NAME = "errors.deadletterqueue.topic.name"
COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
TOPIC_ENABLE = "errors.deadletterqueue.group.enable"
# Kafka's ShareGroupDLQManager causes, as the __dlq.errors.message header carries them.
CLIENT_REJECT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."
ATTEMPTS = 5
BACKOFF_MS = 1000
READ_BYTES = 1 << 20

CreateTopic = Callable[[str, dict[str, str]], TopicInfo]
# One dead letter: key, value, headers.
Letter = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class DeadLetterWriter:
    """Writes share groups' dead letters (see the module docstring)."""

    def __init__(
        self,
        data: DataPlane,
        catalog: TopicCatalog,
        group_configs: GroupConfigStore,
        *,
        auto_create: bool = False,
        prefix: str = "dlq.",
        create_topic: CreateTopic | None = None,
        remote: Callable[[], RemoteShareState | None] = lambda: None,
        clock: Clock = wall_clock_ms,
    ) -> None:
        """``remote``: the other nodes' data partitions, in cluster mode (module docstring)."""
        self.data = data
        self.catalog = catalog
        self.group_configs = group_configs
        self.auto_create = auto_create
        self.prefix = prefix
        self.create_topic = create_topic
        self.remote = remote
        self.clock = clock
        self.backoff_ms = BACKOFF_MS
        self._producer_id: int | None = None
        self._producer_lock = asyncio.Lock()
        # The next sequence per (producer id, dead-letter topic, partition), and one lock
        # per dead-letter partition (its copies one at a time).
        self._sequences: dict[tuple[int, str, int], int] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

    async def _producer(self) -> int:
        async with self._producer_lock:
            if self._producer_id is None:
                pid = self.data.producer_ids.allocate()
                self._producer_id = await pid if inspect.isawaitable(pid) else pid
            return self._producer_id

    def _new_producer(self, stale: int) -> None:
        """A copy of ``stale``'s may or may not be in the log: the next copies take a new id."""
        if self._producer_id == stale:
            self._producer_id = None
        self._sequences = {k: v for k, v in self._sequences.items() if k[0] != stale}

    def topic_of(self, group_id: str) -> str | None:
        """The group's dead-letter topic; None when it has none (Kafka's isDLQEnabledForGroup)."""
        name = (self.group_configs.get(group_id).get(TOPIC_NAME) or "").strip()
        return name or None

    def check(self, group_id: str, name: str) -> str | None:
        """Kafka's validateDlqTopic: why ``name`` cannot take the group's dead letters."""
        if name.startswith("__"):
            return (
                f"Configured DLQ topic name in share group: {group_id} cannot start with __, "
                f"topic: {name}."
            )
        info = self.catalog.get(name)
        if info is not None and info.configs.get(TOPIC_ENABLE, "false").strip().lower() != "true":
            return (
                f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, "
                f"topic: {name}."
            )
        if info is None and not (self.auto_create and self.create_topic is not None):
            return (
                "DLQ topic does not exist and auto create is disabled on cluster for share "
                f"group: {group_id}, topic: {name}."
            )
        if self.prefix and not name.startswith(self.prefix):
            return (
                "Configured DLQ topic name does not comply with the DLQ topic prefix in share "
                f"group: {group_id}, topic: {name}, prefix: {self.prefix}."
            )
        return None

    def _topic(self, name: str) -> TopicInfo:
        info = self.catalog.get(name)
        if info is not None:
            return info
        assert self.create_topic is not None
        configs = {TOPIC_ENABLE: "true", "message.timestamp.type": "CreateTime"}
        try:
            info = self.create_topic(name, configs)
            log.info("created dead-letter topic %s", name)
            return info
        except TopicExistsError:
            created = self.catalog.get(name)
            assert created is not None
            return created

    async def write(
        self, group_id: str, source: TopicInfo, plog: PartitionLog, partition: int, dl: DeadLetter
    ) -> bool:
        """Copy ``dl``'s offsets of ``source``-``partition`` to the group's dead-letter
        topic, durably; False (logged) when they could not be, the records to be archived
        all the same."""
        name = self.topic_of(group_id)
        why = "the group has no dead-letter topic" if name is None else self.check(group_id, name)
        if name is None or why is not None:
            log.warning("dead letters of %s-%d not written: %s", source.name, partition, why)
            return False
        copy = self.group_configs.get(group_id).get(COPY_RECORD, "false").strip().lower()
        originals = self._originals(plog, dl) if copy == "true" else {}
        records = _letters(group_id, source.name, partition, dl, originals)
        done = 0  # records acknowledged by the partition's leader
        pids: set[int] = set()  # the producer ids this copy was sent with
        for attempt in range(ATTEMPTS):
            info = self._topic(name)
            target = partition % max(info.num_partitions, 1)
            lock = self._locks.setdefault((info.name, target), asyncio.Lock())
            async with lock:
                why, done = await self._append(info, target, records, done, pids)
            if why is None:
                return True
            log.warning(
                "writing dead letters of %s-%d to %s-%d failed (attempt %d): %s",
                source.name,
                partition,
                name,
                target,
                attempt + 1,
                why,
            )
            if attempt + 1 < ATTEMPTS:
                await asyncio.sleep(self.backoff_ms * (1 << attempt) / 1000)
        for pid in pids:
            self._new_producer(pid)
        return False

    def _originals(
        self, plog: PartitionLog, dl: DeadLetter
    ) -> dict[int, tuple[bytes | None, bytes | None]]:
        """The key and value of each offset of ``dl`` still in the log."""
        out: dict[int, tuple[bytes | None, bytes | None]] = {}
        offset = max(dl.first, plog.log_start_offset)
        while offset <= dl.last:
            try:
                data = plog.read(offset, READ_BYTES, max_offset=dl.last + 1)
            except OffsetOutOfRangeError:
                break
            last_seen = offset - 1
            for h, start, end in iter_batches(data):
                last_seen = max(last_seen, h.last_offset)
                if h.is_control:
                    continue
                for r in decode_records(data[start:end]):
                    o = h.base_offset + r.offset_delta
                    if dl.first <= o <= dl.last:
                        out[o] = (r.key, r.value)
            if last_seen < offset:
                break
            offset = last_seen + 1
        return out

    async def _append(
        self, info: TopicInfo, target: int, records: list[Letter], done: int, pids: set[int]
    ) -> tuple[str | None, int]:
        """``records[done:]`` appended to ``target`` in batches: (None, all) once durable,
        else (why, how many are). A batch for another node's leader is the idempotent
        producer's, with its sequence (its id added to ``pids``); one appended here, whose
        answer cannot be lost, is a plain batch, as Kafka writes dead letters."""
        now = self.clock()
        max_bytes = self.data.log_config(info).max_message_bytes
        for part in _split(records[done:], now, max_bytes):
            remote, leader = self._leader(info, target)
            key, sequence = None, -1
            if remote is not None:
                pid = await self._producer()
                pids.add(pid)
                key = (pid, info.name, target)
                sequence = self._sequences.get(key, 0)
            batch = _encode(part, now, key[0] if key else -1, sequence)
            why_not = await self._produce(info, target, batch, remote, leader)
            if why_not is not None:
                return why_not, done
            if key is not None:
                self._sequences[key] = sequence + len(part)
            done += len(part)
        return None, done

    def _leader(self, info: TopicInfo, target: int) -> tuple[RemoteShareState | None, int | None]:
        """(the inter-broker client, the leader) when another node leads ``target``."""
        remote = self.remote()
        leader = None
        if remote is not None and remote.leader_of is not None:
            leader = remote.leader_of(info.name, target)
        if remote is not None and leader is not None and leader != remote.node_id:
            return remote, leader
        return None, leader

    async def _produce(
        self,
        info: TopicInfo,
        target: int,
        batch: bytes,
        remote: RemoteShareState | None,
        leader: int | None,
    ) -> str | None:
        """One batch appended as an acks=-1 Produce (by ``remote``'s node ``leader``, else
        here); None once durable."""
        req = produce.Request(
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                produce.TopicProduceData(
                    name=info.name,
                    partition_data=[produce.PartitionProduceData(index=target, records=batch)],
                )
            ],
        )
        if remote is not None and leader is not None:
            answer = await remote.produce(leader, req)
            if isinstance(answer, str):
                return answer
            res = answer
        else:  # led here, or by nobody known: a refusal there is retried
            header = RequestHeader(produce.API_KEY, 9, 0, "kgc-share-dlq")
            local = self.data.produce_checked(
                header, req, ClientInfo("kgc-share-dlq", "127.0.0.1", 0, 0), 0, None
            )
            if isinstance(local, Deferred):
                local = await local
            assert isinstance(local, produce.Response)
            res = local
        parts = [p for t in res.responses for p in t.partition_responses if p.index == target]
        if not parts:
            return f"node {leader} left partition {target} out of its answer"
        pr = parts[0]
        if pr.error_code != ErrorCode.NO_ERROR:
            return f"{ErrorCode(pr.error_code).name}: {pr.error_message}"
        return None


def _letters(
    group_id: str,
    topic: str,
    partition: int,
    dl: DeadLetter,
    originals: dict[int, tuple[bytes | None, bytes | None]],
) -> list[Letter]:
    """One dead letter per offset of ``dl``: its key and value (when copied) and Kafka's
    headers saying where it came from."""
    why = CLIENT_REJECT if dl.rejected else DELIVERY_COUNT_EXCEEDED
    fixed = (
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
    )
    records: list[Letter] = []
    for o in range(dl.first, dl.last + 1):
        key, value = originals.get(o, (None, None))
        headers = (
            *fixed,
            ("__dlq.errors.offset", str(o).encode()),
            ("__dlq.errors.group", group_id.encode()),
            ("__dlq.errors.delivery.count", str(dl.delivery_count).encode()),
            ("__dlq.errors.message", why.encode()),
        )
        records.append((key, value, headers))
    return records


def _encode(part: list[Letter], now: int, producer_id: int = -1, sequence: int = -1) -> bytes:
    """An uncompressed batch of ``part``, from the idempotent producer when one is given."""
    return encode_batch(
        0,
        [Record(i, 0, key, value, headers) for i, (key, value, headers) in enumerate(part)],
        timestamp_ms=now,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )


def _split(records: list[Letter], now: int, max_bytes: int) -> list[list[Letter]]:
    """``records`` in parts whose batch fits ``max_bytes`` where one record fits, in order."""
    out: list[list[Letter]] = []
    pending = [records] if records else []
    while pending:
        part = pending.pop()
        if len(part) > 1 and len(_encode(part, now)) > max_bytes:
            half = len(part) // 2
            pending.extend((part[half:], part[:half]))
            continue
        out.append(part)
    return out
