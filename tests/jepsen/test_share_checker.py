"""The share-group checker against planted histories: each anomaly it names, and a clean one.

Histories are built as the workload records them: ``send`` (ok ``[partition, offset]``),
``poll`` (ok ``[[partition, offset, value, delivery_count], ...]``) and ``ack`` (ok
``[[partition, offset, type, answered], ...]``), then one anomaly is planted: an accepted
record delivered again, a delivery count going back, a record never delivered, one left
unsettled, a phantom value.
"""

from __future__ import annotations

from typing import Any

from support.jepsen.history import OK, Op
from support.jepsen.share import ACCEPT, REJECT, RELEASE, check_share


class H:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0.0

    def op(self, process: int, f: str, invoke: Any, value: Any) -> None:
        self.t += 1
        self.ops.append(
            Op(process, f, None, value, self.t, self.t + 0.5, OK, invoke, len(self.ops))
        )

    def send(self, value: str, p: int, offset: int) -> None:
        self.op(0, "send", value, [p, offset])

    def poll(self, process: int, got: list[list[Any]]) -> None:
        self.op(process, "poll", None, got)

    def ack(self, process: int, acks: list[list[Any]]) -> None:
        self.op(process, "ack", [a[:3] for a in acks], acks)


def _clean() -> H:
    h = H()
    h.send("s1", 0, 0)
    h.send("s2", 0, 1)
    h.send("s3", 1, 0)
    h.poll(1, [[0, 0, "s1", 1], [0, 1, "s2", 1]])
    h.ack(1, [[0, 0, ACCEPT, True], [0, 1, RELEASE, True]])
    h.poll(2, [[0, 1, "s2", 2], [1, 0, "s3", 1]])
    h.ack(2, [[0, 1, REJECT, True], [1, 0, ACCEPT, False]])  # refused: s3 comes back
    h.poll(2, [[1, 0, "s3", 2]])
    h.ack(2, [[1, 0, ACCEPT, True]])
    return h


def kinds(h: H) -> set[str]:
    return {a.kind for a in check_share(h.ops, limit=3)}


def test_a_clean_history_has_no_anomaly() -> None:
    assert kinds(_clean()) == set()


def test_an_acknowledged_record_delivered_again() -> None:
    h = _clean()
    h.poll(3, [[0, 0, "s1", 2]])  # accepted at the first ack, handed out again
    assert kinds(h) == {"redelivered"}
    h = _clean()
    h.poll(3, [[0, 1, "s2", 3]])  # rejected, handed out again
    assert kinds(h) == {"redelivered"}


def test_a_delivery_count_going_back() -> None:
    h = H()
    h.send("s1", 0, 0)
    h.poll(1, [[0, 0, "s1", 2]])
    h.ack(1, [[0, 0, RELEASE, True]])
    h.poll(2, [[0, 0, "s1", 1]])
    h.ack(2, [[0, 0, ACCEPT, True]])
    assert kinds(h) == {"count-back"}
    h = H()  # the same count again is Kafka's under-count after a reload: no anomaly
    h.send("s1", 0, 0)
    h.poll(1, [[0, 0, "s1", 1]])
    h.poll(2, [[0, 0, "s1", 1]])
    h.ack(2, [[0, 0, ACCEPT, True]])
    assert kinds(h) == set()


def test_lost_unsettled_and_archived_records() -> None:
    h = _clean()
    h.send("s4", 1, 1)  # acknowledged by the broker, never delivered
    assert kinds(h) == {"lost"}
    h = _clean()
    h.send("s4", 1, 1)
    h.poll(1, [[1, 1, "s4", 1]])
    h.ack(1, [[1, 1, RELEASE, True]])  # released and never settled
    assert kinds(h) == {"unsettled"}
    h = _clean()
    h.send("s4", 1, 1)
    h.poll(1, [[1, 1, "s4", 1]])
    h.ack(1, [[1, 1, ACCEPT, False]])  # its partition answered an error: maybe applied
    assert kinds(h) == set()
    h = _clean()
    h.send("s4", 1, 1)
    h.poll(1, [[1, 1, "s4", 3]])  # at the delivery count limit: archived, settled
    h.ack(1, [[1, 1, RELEASE, True]])
    assert kinds(h) == set()


def test_phantoms_and_inconsistent_offsets() -> None:
    h = _clean()
    h.poll(3, [[1, 0, "s9", 3]])
    assert {"phantom", "inconsistent-offset"} <= kinds(h)
