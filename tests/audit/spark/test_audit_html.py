"""``kgc audit``'s HTML report on a real kgc data directory with kept history, drawn by
headless Chromium (Debian's package, ``scripts/ensure-chromium``): every group's chart is
there with its data points once the page's scripts ran, and a screenshot is taken.

Two real groups (aiokafka) commit over a few seconds while records arrive: ``billing``
keeps up, ``reporting`` commits every third round and then stops, so its lag grows.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess

from coordinator.audit.cli import HTML_REPORT, main

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
TOPIC = "orders"
ROUNDS = 12


def chromium() -> str:
    """Chromium's path, installed from Debian if missing; the test skips where it cannot be."""
    found = shutil.which("chromium")
    if found is None:
        run = subprocess.run(
            [str(ROOT / "scripts" / "ensure-chromium")], capture_output=True, text=True
        )
        found = shutil.which("chromium")
        if found is None:
            pytest.skip(
                f"chromium cannot be installed here: {run.stderr.strip() or run.returncode}"
            )
    return found


async def _member(bootstrap: str, group: str) -> AIOKafkaConsumer:
    c = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", heartbeat_interval_ms=300,
    )  # fmt: skip
    await c.start()
    await async_wait_until(lambda: len(c.assignment()) == 3, what=f"{group} owns the partitions")
    return c


async def workload(bootstrap: str) -> int:
    """Records arrive in rounds; ``billing`` commits each round's end, ``reporting`` every
    third round for the first half. Returns the time of the last commit."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    billing = await _member(bootstrap, "billing")
    reporting = await _member(bootstrap, "reporting")
    ends = dict.fromkeys(range(3), 0)
    try:
        for r in range(ROUNDS):
            for p in range(3):
                for _ in range(5 + 3 * p):
                    md = await producer.send_and_wait(TOPIC, b"x" * 50, partition=p)
                    ends[p] = md.offset + 1
            offsets = {TopicPartition(TOPIC, p): OffsetAndMetadata(e, "") for p, e in ends.items()}
            await billing.commit(offsets)
            if r % 3 == 0 and r < ROUNDS // 2:
                await reporting.commit(offsets)
            # pacing the rounds, so the history spans a few seconds of buckets
            await asyncio.sleep(0.3)
        return int(time.time() * 1000)
    finally:
        await producer.stop()
        await billing.stop()
        await reporting.stop()


@pytest.mark.long
def test_html_report_draws_lag_and_commit_rate_per_group(
    tmp_path: Path, spark: Any, kgc: KgcProcess
) -> None:
    browser = chromium()
    from support.clikit import run_cli

    assert run_cli("topics", "create", TOPIC, "--partitions", "3",
                   "--bootstrap-server", kgc.bootstrap).code == 0  # fmt: skip
    last = asyncio.run(workload(kgc.bootstrap))
    assert kgc.stop() == 0
    out = tmp_path / "out"
    code = main(["--log-dir", str(kgc.data_dir), "--out", str(out), "--now-ms", str(last + 500),
                 "--format", "json", "--quiet", "--fail-on", "none"])  # fmt: skip
    assert code == 0
    page = out / HTML_REPORT
    text = page.read_text()
    assert text.count('class="kgc-chart"') == 2, "one chart per group"
    assert "<h2>Findings</h2>" in text
    assert "cdn" not in text.split("<script>", 1)[0]  # plotly.js is inline, not loaded

    # the page drawn: after its scripts ran, each chart has its SVG and its data points
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--virtual-time-budget=15000", f"--user-data-dir={tmp_path / 'chromium'}"]  # fmt: skip
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    charts = re.split(r'<div class="kgc-chart" ', dom)[1:]
    assert {re.match(r'data-group="([^"]+)"', c).group(1) for c in charts} == {  # type: ignore[union-attr]
        "billing",
        "reporting",
    }
    for chart in charts:
        assert 'class="main-svg"' in chart
        assert chart.count('class="point"') >= 2 * 10, "lag and commit rate have their points"
    shot = tmp_path / "report.png"
    subprocess.run(
        [*common, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert shot.stat().st_size > 20_000
    keep = os.environ.get("KGC_AUDIT_REPORT_DIR")  # where to keep the page and its picture
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(page, Path(keep) / HTML_REPORT)
        shutil.copy(shot, Path(keep) / "audit-report.png")
