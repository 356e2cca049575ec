"""What the workers share reaches every worker: topics, configs, ACLs, SCRAM users, producer ids.

A real 2-worker kgc with an authorizer and a SASL/SCRAM listener beside the plaintext one
(worker i on both ports + i). Each change is sent to one worker with kgc's protocol client
(a real admin client picks its broker itself: the controller, worker 0, for topics) and
checked on the other: a topic grown, reconfigured and
deleted (its directories gone, its offsets forgotten by the groups of the worker that did not
answer the DeleteTopics), a group's configs, an ACL, a SCRAM user who then authenticates on
the other worker; InitProducerId on both hands out no id twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.groupkit import commit_offset, fetch_offset
from support.workerskit import Workers, free_ports, group_on, partition_on, wait_for

from coordinator.placement import worker_of
from coordinator.security.credentials import salted_password
from coordinator.tools.client import AuthenticationFailed, ClientSecurity, Connection
from protocol.messages import (
    alter_user_scram_credentials,
    create_acls,
    create_partitions,
    delete_topics,
    describe_acls,
    describe_configs,
    describe_log_dirs,
    incremental_alter_configs,
    init_producer_id,
)

pytestmark = pytest.mark.integration

TOPIC_RESOURCE = 2
GROUP_RESOURCE = 32


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    plain, sasl = free_ports(2), free_ports(2)
    proc = Workers(
        tmp_path_factory.mktemp("shared") / "data",
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-256",
        "--authorizer-class-name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--super-users",
        "User:ANONYMOUS",
        port=plain,
    )
    proc.sasl_port = sasl  # type: ignore[attr-defined]
    proc.start()
    proc.wait_loaded()
    yield proc
    if proc.alive():
        assert proc.stop() == 0


def admin(node: Workers, worker: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.bootstrap_of(worker)})


def raw(node: Workers, worker: int, api_key: int, request: object) -> Any:
    """One request to ``worker``, its response."""
    with Connection.to(node.bootstrap_of(worker)) as c:
        return c.request(api_key, request)[1]


def set_config(
    node: Workers, worker: int, resource_type: int, name: str, key: str, value: str
) -> None:
    resp = raw(
        node,
        worker,
        incremental_alter_configs.API_KEY,
        incremental_alter_configs.Request(
            resources=[
                incremental_alter_configs.AlterConfigsResource(
                    resource_type=resource_type,
                    resource_name=name,
                    configs=[
                        incremental_alter_configs.AlterableConfig(
                            name=key,
                            config_operation=0,
                            value=value,  # SET
                        )
                    ],
                )
            ]
        ),
    )
    assert resp.responses[0].error_code == 0, resp


def done(client: AdminClient, call: str, *args: object) -> None:
    """Call an AdminClient method and wait for every future (the client kept alive)."""
    for future in getattr(client, call)(*args).values():
        future.result(10)


def topic_config(node: Workers, worker: int, resource_type: int, name: str, key: str) -> str | None:
    with Connection.to(node.bootstrap_of(worker)) as c:
        _, resp = c.request(
            describe_configs.API_KEY,
            describe_configs.Request(
                resources=[
                    describe_configs.DescribeConfigsResource(
                        resource_type=resource_type, resource_name=name, configuration_keys=[key]
                    )
                ]
            ),
        )
    (result,) = resp.results
    assert result.error_code == 0, result
    return next((c.value for c in result.configs if c.name == key), None)


def test_topic_created_grown_reconfigured_and_deleted_through_either_worker(
    node: Workers,
) -> None:
    done(admin(node, 0), "create_topics", [NewTopic("lifecycle", 2, 1)])
    node.wait_topic("lifecycle", 2)
    # Grown through worker 1: worker 0 leads some of the new partitions and serves them.
    grown = raw(
        node,
        1,
        create_partitions.API_KEY,
        create_partitions.Request(
            topics=[
                create_partitions.CreatePartitionsTopic(name="lifecycle", count=6, assignments=None)
            ],
            timeout_ms=10000,
        ),
    )
    assert grown.results[0].error_code == 0, grown
    node.wait_topic("lifecycle", 6)
    assert {worker_of("lifecycle", p, 2) for p in range(2, 6)} == {0, 1}
    for p in range(6):
        assert (node.data_dir / f"lifecycle-{p}").is_dir()  # each made by its owner
    # Reconfigured through worker 1, seen by worker 0.
    set_config(node, 1, TOPIC_RESOURCE, "lifecycle", "retention.ms", "123456")
    wait_for(
        "worker 0 to see retention.ms",
        lambda: topic_config(node, 0, TOPIC_RESOURCE, "lifecycle", "retention.ms") == "123456",
        5,
    )
    # Offsets of it in a group worker 0 coordinates; then deleted through worker 1.
    group = group_on(0, 2, "forgets")
    with Connection.to(node.bootstrap_of(0)) as c:
        assert commit_offset(c, group, "lifecycle", 3) == 0
        assert fetch_offset(c, group) == (0, 3)
    deleted = raw(
        node,
        1,
        delete_topics.API_KEY,
        delete_topics.Request(
            topics=[delete_topics.DeleteTopicState(name="lifecycle")],
            topic_names=["lifecycle"],
            timeout_ms=10000,
        ),
    )
    assert deleted.responses[0].error_code == 0, deleted
    wait_for("worker 0 to forget the topic", lambda: not node.knows_topic(0, "lifecycle"), 5)
    assert not list(node.data_dir.glob("lifecycle-*")), "a partition directory was left"
    with Connection.to(node.bootstrap_of(0)) as c:
        wait_for("the offsets to go", lambda: fetch_offset(c, group) == (0, -1), 5)


def test_group_configs_set_through_one_worker_are_the_others(node: Workers) -> None:
    group = group_on(1, 2, "configured")
    set_config(node, 0, GROUP_RESOURCE, group, "consumer.session.timeout.ms", "50000")
    wait_for(
        "worker 1 to see the group's config",
        lambda: (
            topic_config(node, 1, GROUP_RESOURCE, group, "consumer.session.timeout.ms") == "50000"
        ),
        5,
    )


def test_acl_created_through_one_worker_is_the_others(node: Workers) -> None:
    created = raw(
        node,
        0,
        create_acls.API_KEY,
        create_acls.Request(
            creations=[
                create_acls.AclCreation(
                    resource_type=2,  # TOPIC
                    resource_name="orders",
                    resource_pattern_type=3,  # LITERAL
                    principal="User:alice",
                    host="*",
                    operation=3,  # READ
                    permission_type=3,  # ALLOW
                )
            ]
        ),
    )
    assert created.results[0].error_code == 0, created

    def principals_on_worker_1() -> set[str]:
        with Connection.to(node.bootstrap_of(1)) as c:
            _, resp = c.request(
                describe_acls.API_KEY,
                describe_acls.Request(
                    resource_type_filter=1,  # ANY
                    resource_name_filter=None,
                    pattern_type_filter=1,  # ANY
                    principal_filter=None,
                    host_filter=None,
                    operation=1,  # ANY
                    permission_type=1,  # ANY
                ),
            )
        assert resp.error_code == 0, resp
        return {a.principal for r in resp.resources if r.resource_name == "orders" for a in r.acls}

    wait_for("worker 1 to have the ACL", lambda: principals_on_worker_1() == {"User:alice"}, 5)


def test_scram_user_added_through_one_worker_authenticates_on_the_other(node: Workers) -> None:
    salt = b"0123456789abcdef"
    altered = raw(
        node,
        0,
        alter_user_scram_credentials.API_KEY,
        alter_user_scram_credentials.Request(
            upsertions=[
                alter_user_scram_credentials.ScramCredentialUpsertion(
                    name="carol",
                    mechanism=1,  # SCRAM-SHA-256
                    iterations=4096,
                    salt=salt,
                    salted_password=salted_password("SCRAM-SHA-256", "carol-secret", salt, 4096),
                )
            ]
        ),
    )
    assert altered.results[0].error_code == 0, altered
    sasl_port = node.sasl_port + 1  # type: ignore[attr-defined]

    def authenticates(password: str) -> bool:
        security = ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "carol",
                "sasl.password": password,
            }
        )
        try:
            Connection("127.0.0.1", sasl_port, security=security).close()
        except AuthenticationFailed:
            return False
        return True

    wait_for("carol to log in on worker 1", lambda: authenticates("carol-secret"), 5)
    assert not authenticates("wrong")


def test_producer_ids_are_unique_across_workers(node: Workers) -> None:
    ids = []
    for worker in (0, 1):
        with Connection.to(node.bootstrap_of(worker)) as c:
            for _ in range(25):
                _, resp = c.request(
                    init_producer_id.API_KEY,
                    init_producer_id.Request(transactional_id=None, transaction_timeout_ms=-1),
                )
                assert resp.error_code == 0, resp
                ids.append(resp.producer_id)
    assert len(set(ids)) == len(ids) == 50


def test_partition_led_by_one_worker_is_absent_from_the_others_log_manager(
    node: Workers,
) -> None:
    done(admin(node, 0), "create_topics", [NewTopic("owned", 4, 1)])
    node.wait_topic("owned", 4)
    p1 = partition_on("owned", 4, 1, 2)
    # DescribeLogDirs is per broker: each worker lists only the partitions it opened.
    listed = {}
    for worker in (0, 1):
        with Connection.to(node.bootstrap_of(worker)) as c:
            _, resp = c.request(describe_log_dirs.API_KEY, describe_log_dirs.Request(topics=None))
        listed[worker] = {
            (t.name, p.partition_index)
            for r in resp.results
            for t in r.topics
            for p in t.partitions
            if t.name == "owned"
        }
    assert ("owned", p1) in listed[1] and ("owned", p1) not in listed[0]
    assert listed[0] | listed[1] == {("owned", p) for p in range(4)}
    assert not listed[0] & listed[1]
