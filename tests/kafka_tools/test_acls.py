"""kafka-acls (AclCommand) against Kafka and kgc, both with Kafka's StandardAuthorizer.

The session's broker has no authorizer, so this module starts one of its own (and a kgc
next to it) with ``authorizer.class.name`` set and the tools' principal, ``User:ANONYMOUS``
on PLAINTEXT, as super user. ACLs are added (single operations, the --consumer and
--producer conveniences, prefixed patterns, a deny), listed (all, by resource, by
principal) and removed.

AclCommand prints one block per resource. Kafka groups a DescribeAcls answer by resource in
a HashMap whose order follows enum identity hashes, so it changes from one broker process to
the next: blocks, and the entries within one, are compared in sorted order.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess
from support.tools_kit import ACL, Server, compare, run_pair

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def secured_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    kafka = KafkaServer(
        Path(tempfile.mkdtemp(prefix="kgc-kafka-acl-")),
        overrides={"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"},
    )
    kgc = KgcProcess(
        tmp_path_factory.mktemp("tools-kgc-acl") / "data",
        "--node-id",
        "1",
        f"--cluster-id={kafka.cluster_id}",
        "--authorizer-class-name",
        AUTHORIZER,
        "--super-users",
        "User:ANONYMOUS",
    )
    try:
        kafka.start()
        kgc.start()
        yield [Server("kafka", kafka.bootstrap), Server("kgc", kgc.bootstrap)]
    finally:
        if kgc.alive():
            kgc.stop()
        kafka.destroy()


def by_resource(lines: list[str]) -> list[str]:
    """Resource blocks (a header line, its entries) sorted, entries sorted within each."""
    blocks: list[list[str]] = []
    head: list[str] = []
    for line in lines:
        if line.startswith(("Current ACLs for resource", "Adding ACLs for resource")):
            blocks.append([line])
        elif blocks and line.startswith("(principal="):
            blocks[-1].append(line)
        elif line:
            (blocks[-1] if blocks else head).append(line)
    return head + [x for b in sorted([b[0], *sorted(b[1:])] for b in blocks) for x in b]


def acls(pair: list[Server], scenario: str, *args: str) -> None:
    runs = run_pair(ACL, ["--bootstrap-server", "{bootstrap}", *args], pair)
    compare(f"tools.acls.{scenario}", runs, transform=by_resource)
    compare(f"tools.acls.{scenario}", runs, stream="stderr")


def test_acls_add_list_remove(secured_pair: list[Server]) -> None:
    pair = secured_pair
    alice, bob, eve = "User:alice", "User:bob", "User:eve"
    acls(
        pair,
        "add-consumer",
        "--add",
        "--allow-principal",
        alice,
        "--consumer",
        "--topic",
        "kt.acl.t",
        "--group",
        "kt.acl.g",
    )
    acls(
        pair,
        "add-producer-prefixed",
        "--add",
        "--allow-principal",
        bob,
        "--producer",
        "--idempotent",
        "--topic",
        "kt.acl.p",
        "--resource-pattern-type",
        "prefixed",
    )
    acls(
        pair,
        "add-operations",
        "--add",
        "--allow-principal",
        alice,
        "--allow-host",
        "127.0.0.1",
        "--operation",
        "Describe",
        "--operation",
        "DescribeConfigs",
        "--topic",
        "kt.acl.t",
        "--cluster",
    )
    acls(
        pair,
        "add-deny",
        "--add",
        "--deny-principal",
        eve,
        "--operation",
        "All",
        "--topic",
        "*",
        "--group",
        "*",
    )
    acls(pair, "list", "--list")
    acls(pair, "list-topic", "--list", "--topic", "kt.acl.t")
    acls(pair, "list-match", "--list", "--topic", "kt.acl.px", "--resource-pattern-type", "match")
    acls(pair, "list-principal", "--list", "--principal", alice)
    acls(
        pair,
        "remove",
        "--remove",
        "--force",
        "--allow-principal",
        bob,
        "--producer",
        "--topic",
        "kt.acl.p",
        "--resource-pattern-type",
        "prefixed",
    )
    acls(pair, "remove-topic", "--remove", "--force", "--topic", "kt.acl.t")
    acls(pair, "list-after-remove", "--list")
