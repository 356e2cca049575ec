"""``kgc offsets reset``'s own parsers: ``--by-duration`` as Java's ``Duration.parse`` reads
it (Kafka's tool uses it), and ``--from-file`` as Kafka's tool reads its CSV."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from coordinator.tools.admin import UsageError
from coordinator.tools.commands.offsets import _duration_ms, _read_plan_file

S = 1000
M = 60 * S
H = 60 * M
D = 24 * H


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT15M", 15 * M),
        ("PT20.345S", 20 * S + 345),
        ("P2D", 2 * D),
        ("P1DT2H3M4S", D + 2 * H + 3 * M + 4 * S),
        ("pt1h", H),  # letters in either case
        ("PT-6H3M", -6 * H + 3 * M),  # each part signed on its own
        ("-PT6H3M", -(6 * H + 3 * M)),  # the whole negated
        ("-PT-6H+3M", 6 * H - 3 * M),
        ("PT-1.5S", -1500),  # the fraction takes the seconds' sign
        ("PT-0.5S", -500),
        ("PT0.0009S", 0),  # below a millisecond is dropped
        ("PT1,5S", 1500),  # Java takes a comma too
    ],
)
def test_duration_as_java_reads_it(text: str, ms: int) -> None:
    assert _duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1h", "P1H", "P1Y", "P1W", "PT1.5", "PT1H2D"])
def test_durations_java_refuses_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="bad duration"):
        _duration_ms(text)


def test_plan_file_without_group_column_is_the_one_groups(tmp_path: Path) -> None:
    f = tmp_path / "plan.csv"
    f.write_text("orders,0,5\norders,1,7\n\nother.topic,3,0\n")
    assert _read_plan_file(f, ["g"]) == {
        "g": {("orders", 0): 5, ("orders", 1): 7, ("other.topic", 3): 0}
    }
    with pytest.raises(UsageError, match="no group column"):
        _read_plan_file(f, ["g", "h"])


def test_plan_file_with_group_column(tmp_path: Path) -> None:
    f = tmp_path / "plan.csv"
    # a group id may hold a comma: CSV quoting, as Kafka's writer quotes it
    f.write_text('g,orders,0,5\n"a,b",orders,1,7\n')
    assert _read_plan_file(f, ["g"]) == {"g": {("orders", 0): 5}, "a,b": {("orders", 1): 7}}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "has no offsets"),
        ("orders,0,5\norders,x,1\n", "line 2"),
        ("g,orders,0,5\norders,1,1\n", "line 2"),
        ("orders,0\n", "line 1"),
    ],
)
def test_bad_plan_files_are_bad_usage(tmp_path: Path, text: str, why: str) -> None:
    f = tmp_path / "plan.csv"
    f.write_text(text)
    with pytest.raises(UsageError, match=why):
        _read_plan_file(f, ["g"])
    with pytest.raises(UsageError, match="cannot read"):
        _read_plan_file(tmp_path / "missing.csv", ["g"])
