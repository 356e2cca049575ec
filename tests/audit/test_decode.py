"""The audit's segment decoder on a small hand-built offsets segment (no Spark).

Every expected figure below was worked out by hand from the records listed in ``SEGMENT``,
following the rules of ``coordinator.audit.decode``: a tombstone ends a run of commits for
the rewind / timestamp checks but not for the leader-epoch check, an undecodable value is a
finding and otherwise only counts for lo1/lo2, W keeps the last ``window`` commits.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from storage.record_batch import encode_batch
from storage.records import (
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)

pytest.importorskip("numpy")
pytest.importorskip("pyarrow")

from coordinator.audit.decode import decode_file

A = encode_offset_commit_key("g", "t", 0)
B = encode_offset_commit_key("g", "t", 1)
C = encode_offset_commit_key("h", "t", 0)
PATH = "/data/__consumer_offsets-1/00000000000000000000.log"
NPARTS = 4
FUTURE = 8000  # commit timestamps after this are "in the future"


def commit(offset: int, ts: int, epoch: int = -1) -> bytes:
    return encode_offset_commit_value(offset, "", ts, leader_epoch=epoch)


def segment() -> bytes:
    member = MemberMetadata("m0", None, "c", "/h", 100, 10, b"", b"")
    batches = [
        # (base offset, batch timestamp, records); comments give the log offset
        (0, 1000, [(A, commit(10, 1000)), (B, None), (A, commit(20, 2000, 3))]),  # 0..2
        (
            3,
            2000,
            [
                (B, commit(5, 1500, 2)),  # 3
                (A, commit(15, 1900, 2)),  # 4: rewind, time backwards, epoch 3 -> 2
                (A, None),  # 5
                (A, commit(12, 1800)),  # 6: after a tombstone: no rewind/time checks
            ],
        ),
        (
            7,
            9000,
            [
                (A, commit(30, 5000, 1)),  # 7: epoch 2 -> 1 (tombstones do not reset it)
                (C, struct.pack(">h", 7) + bytes(22)),  # 8: unknown value version
                (C, encode_offset_commit_value(1, "", 9000, expire_timestamp=9999)),  # 9
                (B, commit(4, 1400)),  # 10: rewind 5 -> 4, time 1500 -> 1400
                (
                    encode_group_metadata_key("g"),
                    encode_group_metadata_value("consumer", 2, "range", "m0", 6000, [member]),
                ),  # 11
                (B, None),  # 12
            ],
        ),
    ]
    return b"".join(encode_batch(base, recs, timestamp_ms=ts) for base, ts, recs in batches)


def finding(check: str, detail: str, lo: int, grp: str, part: int, sev: str = "warn") -> Any:
    return {
        "kind": "F",
        "src": PATH,
        "opart": 1,
        "seg": 0,
        "grp": grp,
        "topic": "t",
        "part": part,
        "lo1": lo,
        "severity": sev,
        "chk": check,
        "detail": detail,
    }


def key_row(grp: str, part: int, **fields: Any) -> Any:
    return {
        "kind": "K",
        "src": PATH,
        "opart": 1,
        "seg": 0,
        "grp": grp,
        "topic": "t",
        "part": part,
        "expected": partition_for(grp, NPARTS),
        **fields,
    }


def window_row(grp: str, part: int, lo: int, off: int, ts: int, ep: int) -> Any:
    return {
        "kind": "W",
        "opart": 1,
        "seg": 0,
        "grp": grp,
        "topic": "t",
        "part": part,
        "lo1": lo,
        "off1": off,
        "ts1": ts,
        "ep1": ep,
        "expected": partition_for(grp, NPARTS),
    }


def test_hand_built_segment() -> None:
    buf = segment()
    rows = decode_file(PATH, buf, window=2, num_partitions=NPARTS, future_limit_ms=FUTURE)
    g0, g1 = ("g", 0), ("g", 1)
    assert rows == [
        # findings in file order
        finding("offset_rewind", "committed offset went from 20 to 15", 4, *g0),
        finding("commit_timestamp_backwards", "commit timestamp went from 2000 to 1900", 4, *g0),
        finding("leader_epoch_regression", "leader epoch went from 3 to 2", 4, *g0),
        finding("leader_epoch_regression", "leader epoch went from 2 to 1", 7, *g0),
        finding(
            "unknown_record_version",
            "offset commit value: unknown OffsetCommitValue version 7",
            8,
            "h",
            0,
        ),
        finding(
            "commit_timestamp_in_future", "commit timestamp 9000 is after the audit time", 9, "h", 0
        ),
        finding("offset_rewind", "committed offset went from 5 to 4", 10, *g1),
        finding("commit_timestamp_backwards", "commit timestamp went from 1500 to 1400", 10, *g1),
        # the segment: offsets 0..12, 13 records in 3 batches
        {
            "kind": "S",
            "src": PATH,
            "opart": 1,
            "seg": 0,
            "lo1": 0,
            "lo2": 12,
            "n": 13,
            "n2": 3,
            "size": len(buf),
            "tsmax": 9000,
        },
        # keys in order of first appearance: A (offset 0), B (1), C (8)
        key_row(
            *g0,
            lo1=0,
            lo2=7,
            off1=10,
            off2=30,
            ts1=1000,
            ts2=5000,
            tsmax=5000,
            ep1=3,  # the first known epoch (the first commit had none)
            ep2=1,
            n=5,
            n2=1,
            lead_tomb=None,
            last_tomb=False,
            expire=-1,
        ),
        window_row(*g0, 6, 12, 1800, -1),
        window_row(*g0, 7, 30, 5000, 1),
        key_row(
            *g1,
            lo1=1,
            lo2=12,
            off1=5,
            off2=4,
            ts1=1500,
            ts2=1400,
            tsmax=1500,
            ep1=2,
            ep2=2,
            n=2,
            n2=2,
            lead_tomb=1,  # its first event is a tombstone
            last_tomb=True,
            expire=-1,
        ),
        window_row(*g1, 3, 5, 1500, 2),
        window_row(*g1, 10, 4, 1400, -1),
        key_row(
            "h",
            0,
            lo1=8,  # the undecodable record still counts here
            lo2=9,
            off1=1,
            off2=1,
            ts1=9000,
            ts2=9000,
            tsmax=9000,
            ep1=-1,
            ep2=-1,
            n=1,
            n2=0,
            lead_tomb=None,
            last_tomb=False,
            expire=9999,  # a v1 value
        ),
        window_row("h", 0, 9, 1, 9000, -1),
        {
            "kind": "G",
            "src": PATH,
            "opart": 1,
            "seg": 0,
            "grp": "g",
            "lo1": 11,
            "lo2": 11,
            "ep1": 2,
            "ep2": 2,
            "n": 1,
            "n2": 0,
            "lead_tomb": None,
            "last_tomb": False,
            "members": 1,
            "ptype": "consumer",
            "state_ts": 6000,
            "expected": partition_for("g", NPARTS),
        },
    ]


def test_window_keeps_the_last_commits_of_each_key() -> None:
    rows = decode_file(PATH, segment(), window=10, num_partitions=NPARTS)
    w = [(r["grp"], r["part"], r["lo1"]) for r in rows if r["kind"] == "W"]
    assert w == [("g", 0, lo) for lo in (0, 2, 4, 6, 7)] + [("g", 1, 3), ("g", 1, 10), ("h", 0, 9)]
    # no future limit given: nothing is in the future
    assert not [r for r in rows if r.get("chk") == "commit_timestamp_in_future"]
