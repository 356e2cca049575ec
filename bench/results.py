"""Headline figures of a benchmark, saved for bench/regress.py.

How this works: a benchmark calls ``record(bench, measure, value, unit, better)`` next to
the line it prints. When the environment names a file in ``KGC_BENCH_RESULTS`` (regress.py
sets it for each run), the figure is appended there as one JSON line; otherwise nothing
happens, so a benchmark run by hand prints exactly what it printed before. ``better`` says
which way is an improvement ("higher" for rates, "lower" for times and CPU), which
regress.py needs to flag a regression.
"""

from __future__ import annotations

import json
import os
from typing import Literal

ENV = "KGC_BENCH_RESULTS"


def record(
    bench: str,
    measure: str,
    value: float,
    unit: str,
    better: Literal["higher", "lower"],
) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    line = {"bench": bench, "measure": measure, "value": value, "unit": unit, "better": better}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
