"""Other kgc source trees to benchmark against: an old revision, a compiled build.

How this works
--------------
A *tree* is a kgc that a benchmark starts instead of the checkout's own: a directory of
sources (``PATH``) run by a Python (``PYTHON``, default this one). ``--tree NAME=PATH`` or
``--tree NAME=PATH:PYTHON`` in bench_peer / regress names one; ``NAME=:PYTHON`` is a
Python whose own site-packages hold kgc (the compiled venv below).

A server from a tree runs with ``cwd`` = the tree (``python -m`` puts the cwd first on
the import path: running from /work/main would import the checkout's sources) and
``PYTHONPATH`` = the tree alone (replacing any PYTHONPATH of the caller). The checkout's
editable install does not shadow it: its finder (``__editable___kgc_*_finder``) is
*appended* to ``sys.meta_path``, after the path finder that finds the tree on
PYTHONPATH -- ``check()`` verifies it for every tree before a benchmark starts, by
importing ``coordinator``, ``storage`` and ``protocol`` exactly as the server will and
refusing a tree whose modules come from elsewhere.

Preparing trees (``python bench/trees.py ...``):

* ``prepare REV``: ``git archive REV`` unpacked at ``/tmp/kgc-trees/<sha12>`` (pure Python,
  no install: the main venv's dependencies serve it through PYTHONPATH). Not a git
  worktree, so the checkout's ``.git`` gains nothing. Prints ``PATH``.
* ``compiled REV``: the optional mypyc build (setup.py, as ``scripts/test-compiled`` does
  it) of REV: ``KGC_MYPYC=1 pip wheel`` of the archived tree (~3 min of gcc), installed
  (non-editable, ``--no-deps``) into the venv ``/tmp/kgc-trees/compiled-venv`` whose
  ``.pth`` line puts the main venv's site-packages after its own (the dependencies, without
  the main venv's editable finder: a path added by a ``.pth`` line is not a site dir, so
  its own ``.pth`` files are not run). Prints ``:PYTHON`` for ``--tree compiled=:PYTHON``.
* ``check NAME=SPEC``: where that tree's modules come from, and which are compiled.

Flags: an old tree's ``kgc serve`` may not know a flag the benchmark passes. ``adapt()``
reads the tree's ``serve --help`` once, renames the flags that were renamed (the logging
flags became ``--kgc-log-*``) and drops, with a printed warning, a flag it does not know
(and its value).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from checkout import ROOT
from support.kgc_process import KgcProcess

TREES = Path(tempfile.gettempdir()) / "kgc-trees"
COMPILED_VENV = TREES / "compiled-venv"
# New flag name -> its name in older trees (renamed when kgc's flags met Kafka's).
RENAMED = {"--kgc-log-level": "--log-level", "--kgc-log-format": "--log-format"}


@dataclass(frozen=True)
class Tree:
    """A kgc to run: ``path`` (sources, or None: the Python's installed kgc) and ``python``."""

    name: str
    path: Path | None
    python: str

    @classmethod
    def parse(cls, spec: str) -> Tree:
        """``NAME=PATH``, ``NAME=PATH:PYTHON`` or ``NAME=:PYTHON``."""
        name, sep, rest = spec.partition("=")
        if not sep or not name:
            raise SystemExit(f"--tree {spec!r}: expected NAME=PATH[:PYTHON]")
        path_s, _, python = rest.partition(":")
        path = Path(path_s).resolve() if path_s else None
        if path is not None and not (path / "coordinator" / "__main__.py").exists():
            raise SystemExit(f"--tree {spec!r}: {path} holds no kgc sources")
        if path is None and not python:
            raise SystemExit(f"--tree {spec!r}: give a PATH, a PYTHON, or both")
        return cls(name, path, python or sys.executable)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if self.path is not None:
            env["PYTHONPATH"] = str(self.path)
        env["PYTHONNOUSERSITE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def cwd(self) -> Path:
        """The tree itself; for an installed kgc a directory with no sources in it."""
        return self.path if self.path is not None else Path(tempfile.gettempdir())

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.python, *args],
            cwd=self.cwd(),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def serve_command(self, *flags: str) -> list[str]:
        return [self.python, "-m", "coordinator", "serve", *self.adapt(list(flags))]

    @functools.cached_property
    def serve_flags(self) -> frozenset[str]:
        r = self.run("-m", "coordinator", "serve", "--help")
        if r.returncode:
            raise SystemExit(f"tree {self.name}: kgc serve --help failed:\n{r.stderr}")
        return frozenset(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", r.stdout))

    def adapt(self, flags: list[str]) -> list[str]:
        """``flags`` as this tree's ``kgc serve`` knows them (see the module docstring)."""
        known = self.serve_flags
        out: list[str] = []
        i = 0
        while i < len(flags):
            flag = flags[i]
            i += 1
            if not flag.startswith("--"):
                out.append(flag)
                continue
            name, eq, value = flag.partition("=")
            if name not in known and RENAMED.get(name) in known:
                name = RENAMED[name]
            if name in known:
                out.append(name + eq + value)
                continue
            dropped = [flag]
            if not eq and i < len(flags) and not flags[i].startswith("--"):
                dropped.append(flags[i])
                i += 1
            warn(f"tree {self.name}: kgc serve does not know {' '.join(dropped)}: not passed")
        return out

    def check(self, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
        """Where this tree's kgc is imported from (raises if not from the tree), one line.
        ``cwd``/``env``: as a process started there sees it (regress.py's harness)."""
        probe = (
            "import coordinator, storage, protocol, importlib, json\n"
            "hot = ['protocol.framing', 'storage.record_batch', 'coordinator.group.shard']\n"
            "files = [m.__file__ or str(list(m.__path__)) for m in (coordinator, storage, protocol)]\n"
            "so = [h for h in hot if importlib.import_module(h).__file__.endswith('.so')]\n"
            "print(json.dumps([files, so]))\n"
        )
        r = subprocess.run(
            [self.python, "-c", probe],
            cwd=cwd or self.cwd(),
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r.returncode:
            raise SystemExit(f"tree {self.name}: cannot import kgc:\n{r.stderr}")
        files, so = json.loads(r.stdout.strip().splitlines()[-1])
        # A package without __init__.py (a namespace: no __file__) counts as elsewhere: a
        # tree lacking a package gets the checkout's through the editable finder.
        if self.path is not None:
            outside = [
                f
                for f in files
                if not f.endswith((".py", ".so")) or not Path(f).resolve().is_relative_to(self.path)
            ]
        else:
            outside = [f for f in files if Path(f.strip("[']")).resolve().is_relative_to(ROOT)]
        if outside:
            raise SystemExit(f"tree {self.name}: kgc imported from elsewhere: {outside}")
        where = Path(files[0]).resolve().parent.parent
        compiled = f", compiled: {', '.join(so)}" if so else ", pure Python"
        return f"tree {self.name}: {where} with {self.python}{compiled}"


class TreeKgcProcess(KgcProcess):
    """``KgcProcess`` (tests/support/kgc_process.py) with the server from ``tree``: its Python, cwd,
    PYTHONPATH and flags (adapted); the client side (``wait_loaded``, metrics) is ours."""

    def __init__(self, tree: Tree, data_dir: Path, *extra: str) -> None:
        super().__init__(data_dir, *extra)
        self.tree = tree

    def spawn(self, flags: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.tree.serve_command(*flags),
            cwd=self.tree.cwd(),
            env=self.tree.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def prepare(rev: str, root: Path = TREES) -> Path:
    """The sources of ``rev`` at ``root/<sha12>`` (reused when already there)."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    dest = root / sha[:12]
    marker = dest / ".kgc-tree-rev"
    if marker.exists() and marker.read_text().strip() == sha:
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", sha], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise SystemExit(f"git archive {sha} failed")
    marker.write_text(sha + "\n")
    return dest


def compiled(rev: str, venv: Path = COMPILED_VENV, selection: str = "1") -> str:
    """Build ``rev`` with mypyc and install it into ``venv``; returns the venv's Python."""
    src = prepare(rev)
    sha = (src / ".kgc-tree-rev").read_text().strip()
    wheels = Path(tempfile.mkdtemp(prefix="kgc-wheel-", dir=TREES))
    try:
        # A copy: the build writes build/ and *.egg-info into the tree it builds.
        build_src = wheels / "src"
        shutil.copytree(src, build_src)
        print(f"building {sha[:12]} with mypyc (KGC_MYPYC={selection}) ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), "."],
            cwd=build_src,
            env={**os.environ, "KGC_MYPYC": selection},
            check=True,
        )
        wheel = next(wheels.glob("kgc-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            n_so = sum(1 for n in z.namelist() if n.endswith(".so"))
        if not n_so:
            raise SystemExit(f"{wheel.name} holds no compiled modules")
        python = venv / "bin" / "python"
        if not python.exists():
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(venv)], check=True)
        # The main venv's packages after the venv's own (see the module docstring).
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        main_site = subprocess.run(
            [sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        (Path(site) / "kgc-main-venv-deps.pth").write_text(main_site + "\n")
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--force-reinstall",
                str(wheel),
            ],
            check=True,
        )
        (venv / ".kgc-tree-rev").write_text(f"{sha} KGC_MYPYC={selection}\n")
        print(f"{wheel.name}: {n_so} extension files, installed into {venv}", flush=True)
        return str(python)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="archive REV at /tmp/kgc-trees/<sha12>; prints PATH")
    p.add_argument("rev")
    c = sub.add_parser("compiled", help="mypyc build of REV into a venv; prints :PYTHON")
    c.add_argument("rev")
    c.add_argument("--venv", type=Path, default=COMPILED_VENV)
    c.add_argument("--selection", default="1", help="KGC_MYPYC value: 1 or all")
    k = sub.add_parser("check", help="where a tree's kgc is imported from")
    k.add_argument("spec", nargs="+", help="NAME=PATH[:PYTHON]")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        path = prepare(args.rev)
        print(Tree.parse(f"{args.rev}={path}").check(), file=sys.stderr)
        print(path)
    elif args.cmd == "compiled":
        python = compiled(args.rev, args.venv, args.selection)
        print(Tree.parse(f"compiled=:{python}").check(), file=sys.stderr)
        print(f":{python}")
    else:
        for spec in args.spec:
            print(Tree.parse(spec).check())
    return 0


if __name__ == "__main__":
    sys.exit(main())
