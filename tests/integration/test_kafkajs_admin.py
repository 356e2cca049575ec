"""kafkajs's admin client (the Node.js tools' library) against a real ``kgc serve``: the calls
admin UIs make (DescribeCluster, DescribeConfigs, AlterConfigs, CreatePartitions,
DeleteRecords, Metadata of ``__consumer_offsets``) each answered as Kafka answers them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration
JS_DIR = Path(__file__).resolve().parents[1] / "js"


@pytest.fixture
def kgc(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_kafkajs_admin_calls_of_the_tools(kgc: KgcProcess) -> None:
    assert shutil.which("node") and (JS_DIR / "node_modules").exists(), "run npm ci in tests/js"
    out = subprocess.run(
        ["node", str(JS_DIR / "admin_tools.js"), kgc.bootstrap, "js-tools"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["describeCluster"]["ok"]["brokers"] == 1, result
    assert result["describeConfigs"]["ok"]["cleanup.policy"] == "delete", result
    assert result["alterConfigs"]["ok"] == "3600000", result
    assert result["createPartitions"]["ok"] == 3, result
    assert result["deleteTopicRecords"]["ok"] == {"low": "2", "high": "5"}, result
    assert result["listInternalTopic"]["ok"] == 50, result
