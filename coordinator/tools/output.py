"""Output of the operator commands: rich tables for people, JSON for scripts.

How this works: ``Output`` picks the form from ``--output``. Tables go to a terminal with
rich's layout, to a pipe as plain aligned columns (never wrapped or cut); JSON rows use the
column names in snake case. Remarks for people go to stderr, so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from typing import Any


class Output:
    def __init__(self, args: argparse.Namespace) -> None:
        self.json = getattr(args, "output", "table") == "json"

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from rich import box
        from rich.console import Console
        from rich.table import Table

        tty = sys.stdout.isatty()
        table = Table(box=box.SIMPLE_HEAD if tty else None, pad_edge=False, show_edge=False)
        for col in columns:
            table.add_column(col, no_wrap=not tty, overflow="fold")
        for row in rows:
            table.add_row(*("-" if v is None else str(v) for v in row))
        if tty:
            Console(highlight=False).print(table)
            return
        # Pipes get plain aligned columns, never wrapped or cut, without trailing blanks.
        console = Console(width=100_000, highlight=False, color_system=None, file=io.StringIO())
        with console.capture() as cap:
            console.print(table)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))

    def dump(self, obj: Any) -> None:
        print(json.dumps(obj, indent=2, sort_keys=False))

    def note(self, text: str) -> None:
        """Human remarks go to stderr so stdout stays parseable."""
        print(text, file=sys.stderr)


def records(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    keys = [
        c.lower().replace("#", "num_").replace("-", "_").replace(" (id)", "").replace(" ", "_")
        for c in columns
    ]
    return [dict(zip(keys, row, strict=True)) for row in rows]


def show(out: Output, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if out.json:
        out.dump(records(columns, rows))
    else:
        out.table(columns, rows)
