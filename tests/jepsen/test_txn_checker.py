"""The transactions checker against planted histories: each anomaly it names, and a clean one.

Histories are built op by op as the workload records them (``txn`` invoke values with their
records, ``read`` and ``final`` ok values of ``[partition, offset, value]``), then one
anomaly is planted: an aborted record read, a committed transaction half visible, one lost,
a reader passing a committed record, offsets going back, a value at two offsets.
"""

from __future__ import annotations

import math
from typing import Any

from support.jepsen.history import FAIL, INFO, OK, Op
from support.jepsen.txn import check_txn


class H:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t = 0.0

    def _op(self, process: int, f: str, value: Any, status: str, invoke: Any) -> Op:
        self.t += 1
        end = math.inf if status == INFO else self.t + 0.5
        op = Op(process, f, None, value, self.t, end, status, invoke, len(self.ops))
        self.ops.append(op)
        return op

    def txn(
        self, n: int, records: list[list[Any]], decision: str = "commit", status: str = OK
    ) -> None:
        v = {"id": n, "decision": decision, "records": records}
        self._op(0, "txn", v, status, v)

    def read(self, process: int, got: list[list[Any]], f: str = "read") -> None:
        self._op(process, f, got, OK, None)


def _clean() -> H:
    h = H()
    h.txn(1, [[0, "1:0"], [1, "1:1"]])
    h.txn(2, [[0, "2:0"], [2, "2:1"]], decision="abort")
    h.txn(3, [[1, "3:0"], [2, "3:1"]], status=FAIL)
    h.txn(4, [[0, "4:0"], [2, "4:1"]], status=INFO)  # unknown: all or none
    h.read(5, [[0, 0, "1:0"], [1, 0, "1:1"]])
    h.read(5, [[0, 3, "4:0"]])
    return h


FINAL = [[0, 0, "1:0"], [1, 0, "1:1"], [0, 3, "4:0"], [2, 4, "4:1"]]


def kinds(h: H) -> set[str]:
    return {a.kind for a in check_txn(h.ops)}


def test_a_clean_history_has_no_anomaly() -> None:
    h = _clean()
    h.read(10**6, FINAL, "final")
    assert kinds(h) == set()
    h = _clean()
    h.read(10**6, FINAL[:2], "final")  # the unknown transaction wholly absent: fine
    assert kinds(h) == set()


def test_aborted_and_failed_records_read() -> None:
    h = _clean()
    h.read(5, [[2, 1, "2:0"]])  # an aborted transaction's record
    h.read(10**6, FINAL, "final")
    assert kinds(h) == {"aborted-read"}
    h = _clean()
    h.read(10**6, [*FINAL, [2, 5, "3:1"]], "final")  # a failed commit's record
    assert "aborted-read" in kinds(h)


def test_torn_and_lost_commits() -> None:
    h = _clean()
    h.read(10**6, [FINAL[0], *FINAL[2:]], "final")  # txn 1 half visible
    assert kinds(h) == {"torn"}
    h = _clean()
    h.read(10**6, FINAL[:3], "final")  # the unknown txn 4 half visible
    assert kinds(h) == {"torn"}
    h = _clean()
    h.read(10**6, FINAL[2:], "final")  # txn 1 acknowledged, gone
    assert "lost" in kinds(h)


def test_reader_passing_a_committed_record_or_going_back() -> None:
    h = _clean()
    h.read(7, [[0, 3, "4:0"]])  # reader 7 starts past committed offset 0 of partition 0
    h.read(10**6, FINAL, "final")
    assert kinds(h) == {"skip"}
    h = _clean()
    h.read(5, [[0, 0, "1:0"]])  # reader 5 read offset 3 of partition 0, then 0 again
    h.read(10**6, FINAL, "final")
    assert kinds(h) == {"nonmonotonic"}


def test_duplicates_phantoms_and_inconsistent_offsets() -> None:
    h = _clean()
    h.read(10**6, [*FINAL, [1, 7, "1:1"]], "final")
    assert "duplicate" in kinds(h)
    h = _clean()
    h.read(8, [[1, 0, "9:9"]])
    h.read(10**6, FINAL, "final")
    assert "phantom" in kinds(h) and "inconsistent-offset" in kinds(h)
