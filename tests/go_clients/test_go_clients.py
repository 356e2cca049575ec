"""Go clients against kgc, each scenario also run against Apache Kafka: franz-go and sarama.

How it works: the programs of ``tests/go/cmd`` (built by ``scripts/ensure-go-deps``) each
run one consumer-group scenario end to end with a stock Go client -- create a topic, two
group members, produce, consume, commit, check with the client's admin API, leave, delete
the group and the topic -- failing on any step that goes wrong, and print the outcome as
JSON: only facts that do not depend on generated ids or timing. Each test runs its program
against the module's ``kgc serve`` and the session's reference broker at once, checks the
outcome the scenario names on both, and then requires the two JSON summaries to be equal,
except for differences argued in ``tests/differential/known_differences.toml`` (scenario
``go.<program>.<variant>``, path ``summary.<key>...``).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.diffkit import Difference, load_known
from support.kafkaserver import KafkaServer
from support.kgc_process import KgcProcess

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

PARTITIONS = 4
RECORDS = 200
EVEN = {str(p): RECORDS // PARTITIONS for p in range(PARTITIONS)}


def run(bin_dir: Path, program: str, bootstrap: str, *args: str) -> dict[str, Any]:
    token = uuid.uuid4().hex[:10]
    cmd = [
        str(bin_dir / program),
        "-bootstrap",
        bootstrap,
        "-topic",
        f"go-{program}-{token}",
        "-group",
        f"go-{program}-group-{token}",
        "-partitions",
        str(PARTITIONS),
        "-records",
        str(RECORDS),
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-6000:]}"
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def _flatten(value: Any, path: str) -> dict[str, Any]:
    """Leaves by dotted path; a list's items are named by their index."""
    items = value.items() if isinstance(value, dict) else None
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = ((str(i), v) for i, v in enumerate(value))
    if items is None:
        return {path: value}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(_flatten(v, f"{path}.{k}"))
    return out or {path: value}


def unexplained(scenario: str, kafka: dict[str, Any], kgc: dict[str, Any]) -> list[str]:
    """Where kgc's summary differs from Kafka's and no known difference covers it."""
    ka, kg = _flatten(kafka, "summary"), _flatten(kgc, "summary")
    known = load_known()
    out = []
    for path in list(ka) + [p for p in kg if p not in ka]:
        a, b = ka.get(path, "<absent>"), kg.get(path, "<absent>")
        if a == b:
            continue
        d = Difference(scenario, "summary", path, a, b)
        if not any(k.matches(d) for k in known):
            out.append(str(d))
    return out


def both(
    bin_dir: Path, program: str, kgc: KgcProcess, kafka: KafkaServer, *args: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenario against kgc and against Kafka, at the same time (they share nothing)."""
    with ThreadPoolExecutor(2) as pool:
        on_kgc = pool.submit(run, bin_dir, program, kgc.bootstrap, *args)
        on_kafka = pool.submit(run, bin_dir, program, kafka.bootstrap, *args)
        return on_kgc.result(), on_kafka.result()


def assert_consumed_and_committed(s: dict[str, Any]) -> None:
    """Both members consumed their half once, committed it, and the offsets outlived them."""
    assert s["create_topic_error"] == ""
    assert s["member_partition_counts"] == [PARTITIONS // 2, PARTITIONS // 2]
    assert s["end_offsets"] == EVEN
    assert s["records_consumed"] == RECORDS
    assert s["duplicates"] == 0
    assert not s["misplaced_values"]
    assert s["records_per_member"] == [RECORDS // 2, RECORDS // 2]
    assert s["committed"] == EVEN
    assert not s["client_errors"]
    assert s["describe_after_leave"] == {"state": "Empty", "members": 0, "error": ""}
    assert s["committed_after_leave"] == EVEN
    assert s["delete_group_error"] == ""
    assert s["listed_after_delete"] is False
    assert s["delete_topic_error"] == ""


def assert_kadm_admin_calls(s: dict[str, Any], classic: bool) -> None:
    """kadm's admin calls refused on the active group and accepted on the Empty one."""
    active = s["admin_on_active_group"]
    assert (
        active["admin_commit_error"],
        active["delete_offsets_error"],
        active["delete_group_error"],
    ) == ("UNKNOWN_MEMBER_ID", "GROUP_SUBSCRIBED_TO_TOPIC", "NON_EMPTY_GROUP")
    if classic:  # kadm's Lag describes classic groups only (DescribeGroups)
        assert (active["lag_state"], active["lag_total"]) == ("Stable", 0)
        assert active["lag_errors"] == ["", "", ""]
    assert s["admin_on_empty_group"] == {
        "admin_commit_error": "",
        "committed_0_after_admin_commit": 1,
        "delete_offsets_error": "",
        "partition_0_listed_after_delete_offsets": False,
        "partitions_listed_after_delete_offsets": PARTITIONS - 1,
    }


def test_franz_classic_cooperative_group_commits_like_kafka(
    go_clients: Path, kgc_go: KgcProcess, kafka_broker: KafkaServer
) -> None:
    """kgo consumers (cooperative-sticky, JoinGroup/SyncGroup) and kadm's admin calls:
    create and delete topics, list and describe groups, fetch, commit and delete offsets, lag."""
    on_kgc, on_kafka = both(go_clients, "franz", kgc_go, kafka_broker, "-protocol", "classic")
    for s in (on_kgc, on_kafka):
        assert_consumed_and_committed(s)
        assert_kadm_admin_calls(s, classic=True)
        assert s["committed_leader_epochs"] == {p: 0 for p in EVEN}
        d = s["describe_groups"]
        assert (d["error"], d["state"], d["protocol_type"], d["protocol"]) == (
            "",
            "Stable",
            "consumer",
            "cooperative-sticky",
        )
        assert (d["members"], d["assigned_sizes"], d["assigned_all"]) == (2, [2, 2], True)
        assert s["describe_consumer_groups"]["error"] == "GROUP_ID_NOT_FOUND"
        assert s["listed_stable"] == {
            "type": "classic",
            "protocol_type": "consumer",
            "state": "Stable",
        }
        assert (s["listed_by_own_type"], s["listed_by_other_type"]) == (True, False)
        assert s["listed_after_leave"]["state"] == "Empty"
    assert unexplained("go.franz.classic", on_kafka, on_kgc) == []


@pytest.mark.parametrize("assignor", ["range", "uniform"])
def test_franz_consumer_protocol_group_commits_like_kafka(
    go_clients: Path, kgc_go: KgcProcess, kafka_broker: KafkaServer, assignor: str
) -> None:
    """kgo with ServerSideBalancer (KIP-848: the server's range assignor for kgo's range
    balancer, uniform for its sticky one) and kadm's ConsumerGroupDescribe: a
    consumer-protocol group, not a classic one."""
    args = ("-protocol", "consumer", "-assignor", assignor)
    on_kgc, on_kafka = both(go_clients, "franz", kgc_go, kafka_broker, *args)
    for s in (on_kgc, on_kafka):
        assert_consumed_and_committed(s)
        assert_kadm_admin_calls(s, classic=False)
        assert s["committed_leader_epochs"] == {p: 0 for p in EVEN}
        if assignor == "range":
            assert s["member_partitions"] == [[0, 1], [2, 3]]
        c = s["describe_consumer_groups"]
        assert (c["error"], c["state"], c["assignor"], c["members"]) == ("", "Stable", assignor, 2)
        assert (c["assigned_sizes"], c["assigned_all"], c["assignment_is_target"]) == (
            [2, 2],
            True,
            True,
        )
        assert c["member_epochs_are_group"] and c["assignment_epoch_is_group"]
        assert all("type=1 subscribed-to-topic=true" in m for m in c["clients"])
        assert s["describe_groups"]["error"] == "GROUP_ID_NOT_FOUND"
        assert s["listed_stable"] == {
            "type": "consumer",
            "protocol_type": "consumer",
            "state": "Stable",
        }
        assert (s["listed_by_own_type"], s["listed_by_other_type"]) == (True, False)
        assert s["listed_after_leave"]["state"] == "Empty"
    assert unexplained(f"go.franz.consumer.{assignor}", on_kafka, on_kgc) == []


@pytest.mark.parametrize(
    ("strategy", "version"),
    [("sticky", ""), ("cooperative-sticky", ""), ("range", "default")],
    ids=["sticky", "cooperative-sticky", "range-default-version"],
)
def test_sarama_group_commits_like_kafka(
    go_clients: Path, kgc_go: KgcProcess, kafka_broker: KafkaServer, strategy: str, version: str
) -> None:
    """A sarama ConsumerGroup of two members, an idempotent SyncProducer, ClusterAdmin; at
    sarama's newest protocol level, and at the one a plain ``sarama.NewConfig()`` speaks."""
    args = ("-strategy", strategy, "-version", version)
    on_kgc, on_kafka = both(go_clients, "sarama", kgc_go, kafka_broker, *args)
    for s in (on_kgc, on_kafka):
        assert_consumed_and_committed(s)
        assert (s["version"] == "2.8.0") == (version == "default")  # sarama.DefaultVersion
        assert s["produced_at_expected_offsets"] is True
        d = s["describe_groups"]
        assert (d["error"], d["state"], d["protocol_type"], d["protocol"]) == (
            "",
            "Stable",
            "consumer",
            strategy,
        )
        assert (d["members"], d["assigned_sizes"], d["assigned_all"]) == (2, [2, 2], True)
        assert s["listed_protocol_type"] == "consumer"
        assert s["describe_after_delete"] == {"state": "Dead", "members": 0, "error": ""}
    scenario = f"go.sarama.{strategy}" + (f".{version}-version" if version else "")
    assert unexplained(scenario, on_kafka, on_kgc) == []


def test_franz_reads_a_groups_life_from_the_offsets_topic_like_kafka(
    go_clients: Path, kgc_go: KgcProcess, kafka_broker: KafkaServer
) -> None:
    """What a Go tool reading __consumer_offsets (kminion's way: kgo and kmsg) decodes of
    one classic group: joined, committed, left, deleted -- in Kafka's record formats."""
    on_kgc, on_kafka = both(go_clients, "franz", kgc_go, kafka_broker, "-protocol", "offsets-topic")
    for s in (on_kgc, on_kafka):
        assert s["batch_leader_epochs"] == [0]
        records = s["group_records"]
        assert [(r["kind"], r["tombstone"]) for r in records] == [
            ("group", False),  # the group as the join creates it, empty
            ("group", False),  # generation 1, one member
            ("offset", False),
            ("group", False),  # generation 2, empty after the member left
            ("offset", True),  # DeleteGroups: the offset, then the group
            ("group", True),
        ]
        joined, committed, left = records[1], records[2], records[3]
        assert (joined["generation"], joined["protocol"], len(joined["members"])) == (
            1,
            "range",
            1,
        )
        assert joined["leader_is_member"] is True
        assert (committed["offset"], committed["leader_epoch"], committed["metadata"]) == (
            3,
            0,
            "<member id>",
        )
        assert (left["generation"], left["members"], left["protocol_type"]) == (
            2,
            None,
            "consumer",
        )
    assert unexplained("go.franz.offsets-topic", on_kafka, on_kgc) == []


def test_franz_member_crash_hands_its_partitions_over_at_its_committed_offsets(
    go_clients: Path, kgc_go: KgcProcess, kafka_broker: KafkaServer
) -> None:
    """A kgo member killed outright (no LeaveGroup): its session expires after 6 s, the
    survivor gets every partition and resumes the dead member's at its commits."""
    on_kgc, on_kafka = both(go_clients, "franz", kgc_go, kafka_broker, "-protocol", "failover")
    for s in (on_kgc, on_kafka):
        assert s["partitions_before"] == [2, 2]
        assert s["committed_before_crash"] == EVEN
        assert s["takeover_waited_for_the_session_timeout"] is True
        assert s["committed_after_takeover"] == {p: 2 * o for p, o in EVEN.items()}
        # Its own half of both batches, and the dead member's half of the second only.
        assert (s["a_records"], s["a_records_of_bs_partitions"]) == (300, 100)
        assert (s["a_rereads_of_bs_committed_records"], s["a_duplicates"]) == (0, 0)
        assert not s["a_errors"]
        assert s["describe_groups"] == {
            "error": "",
            "state": "Stable",
            "members": 1,
            "protocol": "cooperative-sticky",
        }
    assert unexplained("go.franz.failover", on_kafka, on_kgc) == []


def test_franz_consumer_protocol_regex_subscription_like_kafka(
    go_clients: Path, kgc_go: KgcProcess, kafka_broker: KafkaServer
) -> None:
    """kgo's ConsumeRegex on a KIP-848 group sends SubscribedTopicRegex: the coordinator
    resolves it (two matching topics at the join, a third created while the group runs)
    and assigns what matches. Only the outcome is compared: Kafka resolves a group's
    regexes off its request path and at most every 10 s, so its assignments came 5-15 s
    after the join and 10 s after the third topic in our runs, kgc's sooner."""
    on_kgc, on_kafka = both(
        go_clients, "franz", kgc_go, kafka_broker, "-protocol", "consumer-regex"
    )
    for s in (on_kgc, on_kafka):
        assert s["assignment"] == ["a0 b0", "a1 b1"]  # range: partition i of each topic
        assert s["assignment_after_new_topic"] == ["a0 b0 c0", "a1 b1 c1"]
        assert (s["records_consumed"], s["duplicates"]) == (60, 0)
        assert not s["errors"]
        d = s["describe_consumer_groups"]
        assert (d["error"], d["state"], d["members"]) == ("", "Stable", 2)
        assert d["subscriptions"] == ["regex=.*(?:(?:^<prefix>-.*)).* names=0"] * 2
    assert unexplained("go.franz.consumer-regex", on_kafka, on_kgc) == []
