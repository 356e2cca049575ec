"""Every request frame captured from real clients decodes completely and re-encodes to the same bytes.

How this works: ``golden/*.jsonl`` (in this repository, next to this file) holds request
frames captured from real clients; each becomes one round-trip case. The frames are read at
collection time, and a separate test fails when there are too few of them, so a checkout
without the data fails loudly instead of running zero round-trips.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.framing import decode_request, encode_request

GOLDEN = Path(__file__).resolve().parent / "golden"
CLIENTS = ("aiokafka", "kafka-python3", "librdkafka")
FRAMES = [
    pytest.param(bytes.fromhex(json.loads(line)), id=f"{f.stem}-{i}")
    for f in sorted(GOLDEN.glob("*.jsonl"))
    for i, line in enumerate(f.read_text().splitlines())
    if line.strip()
]


def test_golden_frames_are_present() -> None:
    found = sorted(f.stem for f in GOLDEN.glob("*.jsonl"))
    assert found == sorted(CLIENTS), f"expected one capture per client under {GOLDEN}: {found}"
    assert len(FRAMES) >= 100, f"expected the golden captures under {GOLDEN}, found {len(FRAMES)}"


@pytest.mark.parametrize("frame", FRAMES)
def test_golden_frame_round_trips(frame: bytes) -> None:
    header, body = decode_request(frame, strict=True)  # raises if any byte is left over
    again = encode_request(header, body)
    assert again[4:] == frame
