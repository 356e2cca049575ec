"""Every request frame captured from real clients decodes completely and re-encodes to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.framing import decode_request, encode_request

GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "notes" / "golden"
FRAMES = [
    pytest.param(bytes.fromhex(json.loads(line)), id=f"{f.stem}-{i}")
    for f in sorted(GOLDEN.glob("*.jsonl"))
    for i, line in enumerate(f.read_text().splitlines())
    if line.strip()
]


def test_golden_frames_are_present() -> None:
    assert len(FRAMES) >= 100, f"expected the golden captures under {GOLDEN}"


@pytest.mark.parametrize("frame", FRAMES)
def test_golden_frame_round_trips(frame: bytes) -> None:
    header, body = decode_request(frame, strict=True)  # raises if any byte is left over
    again = encode_request(header, body)
    assert again[4:] == frame
