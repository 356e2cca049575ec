"""kafka-share-groups --reset-offsets and --delete-offsets against Kafka and kgc, outputs
compared: a group that does not exist yet is reset anyway (which creates it empty, as
Kafka's testAlterShareGroupNonExistentGroupSuccess), its offsets are described, reset again
to the latest offset, and deleted."""

from __future__ import annotations

import pytest
from support.tools_kit import Server, compare, run_pair
from support.tools_setup import create_topic, produce

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


def sg(pair: list[Server], *args: str) -> list:  # type: ignore[type-arg]
    return run_pair(SHARE_GROUPS, ["--bootstrap-server", "{bootstrap}", *args], pair)


def test_share_groups_reset_and_delete_offsets(pair: list[Server]) -> None:
    topic, group = "sgoff.t", "sgoff.g"
    for s in pair:
        create_topic(s.bootstrap, topic, 2)
        produce(s.bootstrap, topic, 5, 2)
    reset = ["--reset-offsets", "--group", group, "--topic", topic]
    compare("tools.share-groups.reset-dry-run", sg(pair, *reset, "--to-earliest"))
    compare("tools.share-groups.reset-earliest", sg(pair, *reset, "--to-earliest", "--execute"))
    compare("tools.share-groups.offsets-after-reset", sg(pair, "--describe", "--group", group))
    compare("tools.share-groups.reset-latest", sg(pair, *reset, "--to-latest", "--execute"))
    compare("tools.share-groups.offsets-latest", sg(pair, "--describe", "--group", group))
    compare(
        "tools.share-groups.delete-offsets",
        sg(pair, "--delete-offsets", "--group", group, "--topic", topic),
    )
    compare("tools.share-groups.offsets-deleted", sg(pair, "--describe", "--group", group))
