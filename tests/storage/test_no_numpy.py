"""``storage`` is the server's codec and log: no numpy anywhere in it.

The offsets audit's columnar decoders (``coordinator.audit.columns``) are built on storage's
scalar codec.  These tests hold the line between the two: no storage module imports numpy,
not even lazily inside a function or for type checking, every storage module imports and
codes with numpy made unimportable, and the audit's columnar path still reads what storage
writes once numpy is back.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import storage

STORAGE = Path(storage.__file__).parent


def test_no_storage_module_imports_numpy() -> None:
    offenders = []
    modules = sorted(STORAGE.rglob("*.py"))
    assert len(modules) > 5  # the scan sees the package
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n == "numpy" or n.startswith("numpy.") for n in names):
                offenders.append(f"{path.relative_to(STORAGE.parent)}:{node.lineno}")
    assert offenders == []


def test_storage_works_without_numpy_and_the_audit_reads_it_with_numpy() -> None:
    code = """
import importlib, pkgutil, sys

import storage

sys.modules["numpy"] = None  # any import of numpy now raises ImportError
modules = [m.name for m in pkgutil.walk_packages(storage.__path__, "storage.")]
for name in modules:
    importlib.import_module(name)
assert "storage.record_batch" in modules and "storage.local.log" in modules, modules

from storage.records import (
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from storage.record_batch import encode_batch, iter_batches, iter_record_tuples

value = encode_offset_commit_value(5, "", 7, leader_epoch=2)
assert decode_offset_commit_value(value).offset == 5
key = encode_offset_commit_key("g", "t", 0)
buf = b"".join(
    encode_batch(base, [(key, value), (None, b"x" * 200), (key, None)], timestamp_ms=9)
    for base in (0, 3)
)
spans = [(start, end) for _, start, end in iter_batches(buf)]
scalar = [t for s, e in spans for t in iter_record_tuples(buf[s:e])]
assert len(scalar) == 6

del sys.modules["numpy"]  # numpy is back: the audit's columnar decoders read the same bytes
import numpy as np

from coordinator.audit.columns import decode_offset_commit_values, record_columns

cols, errors = record_columns(buf, spans)
assert errors == []
assert cols.offset.tolist() == [t[0] for t in scalar]
assert cols.timestamp.tolist() == [t[1] for t in scalar]
piece = lambda s, n: None if n < 0 else cols.data[s : s + n]
assert [piece(s, n) for s, n in zip(cols.key_start.tolist(), cols.key_len.tolist())] == [
    t[2] for t in scalar
]
assert [piece(s, n) for s, n in zip(cols.value_start.tolist(), cols.value_len.tolist())] == [
    t[3] for t in scalar
]
commits = np.flatnonzero(cols.value_len == len(value))
vals = decode_offset_commit_values(cols.data, cols.value_start[commits], cols.value_len[commits])
assert vals.errors == {} and vals.offset.tolist() == [5, 5] and vals.leader_epoch.tolist() == [2, 2]
print("ok", len(modules))
"""
    pytest.importorskip("numpy")  # for the audit's half (the storage half blocks it anyway)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.startswith("ok ")
