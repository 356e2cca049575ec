"""``kgc topics create`` with an invalid topic config: Kafka's message, exit 1, nothing made.

The command runs in process (support.clikit's ``call_cli``)."""

from __future__ import annotations

import pytest
from support.clikit import call_cli
from support.kgc_process import KgcProcess

pytestmark = pytest.mark.integration

INVALID = [
    (
        "retention.ms=abc",
        "Invalid value abc for configuration retention.ms: Not a number of type LONG",
    ),
    (
        "segment.bytes=-1",
        "Invalid value -1 for configuration segment.bytes: Value must be at least 14",
    ),
    (
        "cleanup.policy=bogus",
        "Invalid value bogus for configuration cleanup.policy: "
        "String must be one of: compact, delete",
    ),
]


def test_topics_create_with_invalid_config_fails(kgc: KgcProcess) -> None:
    b = ("--bootstrap-server", kgc.bootstrap)
    for config, message in INVALID:
        run = call_cli("topics", "create", "payments", "--config", config, *b)
        run.assert_clean_error(1)
        assert "INVALID_CONFIG" in run.err and message in run.err, (config, run.err)
        assert "payments" not in call_cli("topics", "list", *b).out, config
    # The server is unharmed by the three refusals: it restarts (one restart checks what
    # they left on disk), and a valid create then works.
    kgc.stop()
    kgc.start()
    ok = call_cli("topics", "create", "payments", "--config", "retention.ms=60000", *b)
    assert ok.code == 0, ok
