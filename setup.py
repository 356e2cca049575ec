"""The optional mypyc-compiled build of kgc's hot, strictly typed modules.

How this works
--------------
pyproject.toml declares the project; this file only adds C extensions, and only when asked:

* ``pip install -e .`` (or ``pip install .``) builds pure Python, as before: no compiler,
  no mypy, nothing here runs but ``setup()``.
* ``KGC_MYPYC=1 pip install -e .`` compiles ``COMPILED`` with mypyc into C extensions that
  Python imports in place of the ``.py`` files beside them (``KGC_MYPYC=all`` adds every
  generated message module: ~6 minutes more of gcc). ``kgc --version`` names the compiled
  modules in use.

mypyc type-checks what it compiles, so the build needs mypy and kgc's runtime dependencies.
They are declared as ``setup_requires`` only when ``KGC_MYPYC`` is set: setuptools' PEP 517
backend hands them to pip as extra build requirements of that build (pip installs them into
its isolated build environment), and ignores them otherwise. The C compiler is gcc and
Python's headers, which the build needs only in this mode.

An editable compiled install leaves the ``.so`` files in the source tree, where they shadow
the ``.py`` files being edited (an edit has no effect until the next compiled install): a
pure ``pip install -e .`` removes them (below). ``KGC_MYPYC_OPT`` sets gcc's optimisation
level (default 3). ``scripts/test-compiled`` builds the compiled wheel in a temporary copy
and runs the unit suites of the compiled modules against it.
"""

from __future__ import annotations

import glob
import os
import sys
import tomllib
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent

# The hot modules (the request codec, the record batch, the classic group core). Left pure:
# protocol/errors.py and classic/state.py (enums: mypyc compiles no gain there), the KIP-848
# consumer groups (copy() through __slots__ and setattr, not a native class), the generated
# messages of APIs off the hot paths (the list below; KGC_MYPYC=all compiles them all).
HOT_MESSAGES = [
    "heartbeat",
    "offset_commit",
    "offset_fetch",
    "join_group",
    "sync_group",
    "leave_group",
    "find_coordinator",
]
COMPILED = [
    "protocol/primitives.py",
    "protocol/framing.py",
    *(f"protocol/messages/{m}.py" for m in HOT_MESSAGES),
    "storage/record_batch.py",
    "storage/records/offsets.py",
    "storage/records/keys.py",
    "storage/records/messages/offsets.py",
    "coordinator/group/offsets/manager.py",
    "coordinator/group/offsets/commit.py",
    "coordinator/group/offsets/fetch.py",
    "coordinator/group/offsets/txn.py",
    "coordinator/group/offsets/delete.py",
    "coordinator/group/shard.py",
    "coordinator/runtime/replay.py",
    "coordinator/group/types.py",
    "coordinator/group/timers.py",
    "coordinator/group/records.py",
    "coordinator/group/partitions.py",
    "coordinator/group/events.py",
    "coordinator/group/topics.py",
    "coordinator/group/classic/describe.py",
    "coordinator/group/classic/group.py",
    "coordinator/group/classic/heartbeat.py",
    "coordinator/group/classic/join.py",
    "coordinator/group/classic/manager.py",
    "coordinator/group/classic/rebalance.py",
    "coordinator/group/classic/subscription.py",
    "coordinator/group/classic/sync.py",
]
# Commands that build extensions; metadata-only runs (egg_info, dist_info) skip mypyc.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def mode() -> str:
    """'' (pure Python), '1' (COMPILED) or 'all' (COMPILED and every message module)."""
    value = os.environ.get("KGC_MYPYC", "").strip().lower()
    return "" if value in ("", "0", "false", "no") else ("all" if value == "all" else "1")


def modules(selection: str) -> list[str]:
    if selection != "all":
        return list(COMPILED)
    messages = sorted(
        p for p in glob.glob("protocol/messages/*.py", root_dir=HERE) if "__init__" not in p
    )
    return list(dict.fromkeys([*COMPILED, *messages]))


def stale_extensions() -> list[Path]:
    """Extension files a compiled editable install left in the source tree."""
    found: list[Path] = []
    for package in ("protocol", "storage", "coordinator"):
        found += (HERE / package).rglob("*.cpython-*.so")
    found += HERE.glob("*__mypyc.cpython-*.so")
    return found


def build_requirements() -> list[str]:
    """mypy (for mypyc) and kgc's runtime dependencies (mypyc type-checks against them)."""
    project = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    mypy = next(d for d in project["optional-dependencies"]["dev"] if d.startswith("mypy"))
    return [mypy, *project["dependencies"]]


def main() -> None:
    selection = mode()
    building = any(arg in BUILDS for arg in sys.argv[1:])
    if not selection:
        if building:
            # A pure build must not leave an earlier compiled build's .so files shadowing
            # the sources (Python imports an extension before a .py of the same name).
            for path in stale_extensions():
                path.unlink()
        setup()
        return
    ext_modules = []
    if building:
        from mypyc.build import mypycify

        os.chdir(HERE)  # mypyc names modules by their paths from the project root
        ext_modules = mypycify(
            modules(selection),
            opt_level=os.environ.get("KGC_MYPYC_OPT", "3"),
            debug_level="0",
            # One extension per module: gcc runs on them in parallel (build_ext below).
            separate=True,
        )
    setup(
        setup_requires=build_requirements(),
        ext_modules=ext_modules,
        options={"build_ext": {"parallel": os.cpu_count() or 1}},
    )


main()
