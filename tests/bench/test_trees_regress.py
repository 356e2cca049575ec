"""Tests of the before/after tooling: bench/trees.py, bench/regress.py, bench_peer's kgc@NAME.

How this works: the flag adaptation, the regression verdict and the summary's ratio pairs are
checked as functions. The rest runs as a user runs it: a tree of HEAD is archived with
``trees.prepare`` (git archive into a temporary root), checked to import its own kgc (not the
checkout's, which the editable install maps), and used as both sides of tiny regress and
bench_peer runs (subprocesses), whose JSON output must hold the figures of both trees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trees
from bench_peer import ratio_pairs
from regress import verdict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def head_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trees.prepare("HEAD", tmp_path_factory.mktemp("trees"))


def old_tree(path: Path) -> trees.Tree:
    """A tree whose serve knows the older logging flag names and no --kgc-workers."""
    t = trees.Tree("old", path, sys.executable)
    t.__dict__["serve_flags"] = frozenset({"--port", "--log-level", "--log-flush-policy"})
    return t


def test_adapt_renames_and_drops_unknown_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = old_tree(tmp_path)
    got = t.adapt(
        [
            "--port",
            "1",
            "--kgc-log-level",
            "WARNING",
            "--kgc-workers",
            "2",
            "--log-flush-policy=none",
        ]
    )
    assert got == ["--port", "1", "--log-level", "WARNING", "--log-flush-policy=none"]
    assert "--kgc-workers 2: not passed" in capsys.readouterr().err


def test_tree_parse_forms(head_tree: Path) -> None:
    t = trees.Tree.parse(f"a={head_tree}")
    assert (t.path, t.python) == (head_tree, sys.executable)
    t = trees.Tree.parse(f"b={head_tree}:/usr/bin/python3")
    assert (t.path, t.python) == (head_tree, "/usr/bin/python3")
    t = trees.Tree.parse("c=:/usr/bin/python3")
    assert (t.path, t.python) == (None, "/usr/bin/python3")
    with pytest.raises(SystemExit):
        trees.Tree.parse(f"d={ROOT / 'bench'}")  # no kgc sources there


def test_prepared_tree_imports_its_own_kgc(head_tree: Path) -> None:
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert (head_tree / ".kgc-tree-rev").read_text().strip() == sha
    line = trees.Tree.parse(f"head={head_tree}").check()
    assert f"tree head: {head_tree} with" in line and "pure Python" in line


def test_check_refuses_a_tree_that_does_not_import(tmp_path: Path) -> None:
    (tmp_path / "coordinator").mkdir()
    (tmp_path / "coordinator" / "__main__.py").write_text("")
    # coordinator is a namespace package there, and storage/protocol would be the
    # checkout's (the editable install's finder fills in what the tree lacks).
    with pytest.raises(SystemExit, match="imported from elsewhere"):
        trees.Tree.parse(f"broken={tmp_path}").check()


def test_verdict_flags_only_a_regression_beyond_threshold_and_noise() -> None:
    assert verdict([100, 101, 99], [95, 96, 94], "higher", 0.1)[1] == ""  # within 10%
    assert verdict([100, 101, 99], [80, 82, 81], "higher", 0.1)[1] == "WORSE"
    assert verdict([100, 60, 99], [80, 82, 81], "higher", 0.1)[1] == "worse?"  # overlaps
    assert verdict([10, 11, 10], [13, 14, 13], "lower", 0.1)[1] == "WORSE"
    assert verdict([10, 11, 10], [5, 6, 5], "lower", 0.1)[1] == ""  # better
    assert verdict([10], [13], "lower", 0.1)[1] == "WORSE (1 round)"
    r, _ = verdict([10, 10], [20, 20], "lower", 0.1)
    assert r == pytest.approx(2.0)


def test_ratio_pairs_every_kgc_to_tansu_and_to_the_baseline() -> None:
    assert ratio_pairs(["kgc", "tansu"]) == [("kgc", "tansu")]
    assert ratio_pairs(["kgc@before", "kgc@after", "tansu"]) == [
        ("kgc@before", "tansu"),
        ("kgc@after", "tansu"),
        ("kgc@after", "kgc@before"),
    ]
    assert ratio_pairs(["kgc@a", "kgc@b"], baseline="kgc@b") == [("kgc@a", "kgc@b")]
    with pytest.raises(SystemExit):
        ratio_pairs(["kgc", "tansu"], baseline="tansu")


@pytest.mark.slow
def test_regress_runs_both_trees_and_tabulates(head_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "regress.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "regress.py"),
            "--tree",
            f"before={head_tree}",
            "--tree",
            f"after={head_tree}",
            "--benches",
            "codec,storage_load",
            "--scale",
            "smoke",
            "--rounds",
            "2",
            "--logs",
            str(tmp_path / "logs"),
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    runs = data["runs"]
    assert {(r["bench"], r["tree"], r["round"]) for r in runs} == {
        (b, t, n) for b in ("codec", "storage_load") for t in ("before", "after") for n in (1, 2)
    }
    assert all(r["ok"] and r["figures"] for r in runs)
    # The order alternates: round 1 before first, round 2 after first.
    order = [(r["round"], r["tree"]) for r in runs if r["bench"] == "codec"]
    assert order == [(1, "before"), (1, "after"), (2, "after"), (2, "before")]
    table = proc.stdout.split("## Regression check", 1)[1]
    assert "| codec | decode Heartbeat v4 request | ns/op" in table
    assert "| storage_load | open + full replay | s" in table
    assert f"{head_tree}" in proc.stdout  # the trees' import check
    assert "not run: bench_audit" in proc.stdout


@pytest.mark.slow
def test_bench_peer_runs_a_tree_target(head_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "peer.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_peer.py"),
            "--tree",
            f"head={head_tree}",
            "--targets",
            "kgc,kgc@head",
            "--workloads",
            "commit1",
            "--rounds",
            "1",
            "--seconds",
            "0.5",
            "--warmup",
            "0.2",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert {r["target"] for r in data["runs"]} == {"kgc", "kgc@head"}
    assert all(r["requests"] > 0 and r["errors"] == 0 for r in data["runs"])
    assert any(str(head_tree) in line for line in data["trees"])
    assert "| kgc@head / kgc |" in proc.stdout
