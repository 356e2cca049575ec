"""The inter-broker client (``coordinator.cluster.peers``) and the transaction channel over
it (``coordinator.cluster.txn_channel``) against a real ``kgc serve``.

How this works: one kgc listens on PLAINTEXT and SASL_PLAINTEXT (PLAIN from a JAAS line,
SCRAM-SHA-512 for a user added offline); the client reaches it as "node 7" through a
placement-like ``nodes()`` list, the way a cluster node reaches its peers. The settings
checks (which listener, which mechanism, which credentials) run on ``Settings`` alone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import uvloop
from support.certkit import Pki, make_pki
from support.kgc_process import KgcProcess, free_port

from coordinator.cluster.peers import (
    PeerAuthenticationError,
    PeerClient,
    PeerConfigError,
    PeerConnectionError,
    PeerSecurity,
    PeerTimeout,
    PeerUnavailable,
)
from coordinator.cluster.txn_channel import ClusterMarkers, RoutedVerifier
from coordinator.config import Settings
from coordinator.placement import NodeAddress
from coordinator.txn.markers import TxnMarker
from protocol.errors import ErrorCode
from protocol.messages import api_versions, metadata

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="alice" password="alice-secret" user_alice="alice-secret";'
)
NODE = 7
VERSIONS = api_versions.Request(client_software_name="kgc-test", client_software_version="1")


class Served:
    def __init__(self, proc: KgcProcess, sasl_port: int, ssl_port: int, pki: Pki) -> None:
        self.proc = proc
        self.sasl_port = sasl_port
        self.ssl_port = ssl_port
        self.pki = pki

    def nodes(self) -> list[NodeAddress]:
        return [
            NodeAddress(
                NODE,
                "127.0.0.1",
                self.proc.port,
                endpoints=(
                    ("PLAINTEXT", "127.0.0.1", self.proc.port),
                    ("SASL_PLAINTEXT", "127.0.0.1", self.sasl_port),
                    ("SSL", "127.0.0.1", self.ssl_port),
                ),
            )
        ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("peers")
    pki = make_pki(base / "pki")
    data = base / "data"
    subprocess.run(
        [sys.executable, "-m", "coordinator", "users", "add", "--data-dir", str(data),
         "--mechanism", "SCRAM-SHA-512", "--password", "bob-secret", "bob"],
        check=True,
    )  # fmt: skip
    port, sasl_port, ssl_port = free_port(), free_port(), free_port()
    proc = KgcProcess(
        data,
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"SSL://127.0.0.1:{ssl_port}",
        "--ssl-keystore-type",
        "PEM",
        "--ssl-keystore-location",
        str(pki.server),
        "--sasl-enabled-mechanisms",
        "PLAIN,SCRAM-SHA-512",
        "--sasl-jaas-config",
        JAAS,
        port=port,
    )
    proc.start()
    try:
        yield Served(proc, sasl_port, ssl_port, pki)
    finally:
        proc.stop()


def settings(**kw: object) -> Settings:
    base: dict[str, object] = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
        "listener_security_protocol_map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    }
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


# -- which listener and credentials (no server)


def test_the_first_listener_by_default() -> None:
    sec = PeerSecurity.from_settings(settings())
    assert (sec.listener, sec.security_protocol, sec.mechanism) == ("PLAINTEXT", "PLAINTEXT", None)


def test_the_inter_broker_listener_logs_in_with_its_jaas_user() -> None:
    sec = PeerSecurity.from_settings(
        settings(
            inter_broker_listener_name="sasl_plaintext",
            sasl_mechanism_inter_broker_protocol="PLAIN",
            listener_name_configs={"listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS},
        )
    )
    assert (sec.listener, sec.mechanism, sec.username, sec.password) == (
        "SASL_PLAINTEXT",
        "PLAIN",
        "alice",
        "alice-secret",
    )


@pytest.mark.parametrize(
    ("kw", "setting"),
    [
        ({"inter_broker_listener_name": "INTERNAL"}, "inter.broker.listener.name INTERNAL"),
        ({"inter_broker_listener_name": "SASL_PLAINTEXT"}, "sasl.mechanism.inter.broker.protocol GSSAPI"),
        (
            {"inter_broker_listener_name": "SASL_PLAINTEXT", "sasl_mechanism_inter_broker_protocol": "OAUTHBEARER"},
            "sasl.mechanism.inter.broker.protocol OAUTHBEARER",
        ),
        (
            {"inter_broker_listener_name": "SASL_PLAINTEXT", "sasl_mechanism_inter_broker_protocol": "PLAIN",
             "sasl_jaas_config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'},
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
    ],
)  # fmt: skip
def test_a_combination_that_cannot_be_served_is_refused_naming_the_setting(
    kw: dict[str, object], setting: str
) -> None:
    with pytest.raises(PeerConfigError) as err:
        PeerSecurity.from_settings(settings(**kw))
    assert str(err.value).startswith(setting)
    assert "\n" not in str(err.value)


# -- against kgc serve


def client(served: Served, security: PeerSecurity, **kw: int) -> PeerClient:
    return PeerClient(served.nodes, security, node_id=1, **kw)


@pytest.mark.integration
async def test_requests_are_pipelined_on_one_connection(served: Served) -> None:
    peers = client(served, PeerSecurity())
    try:
        answers = await asyncio.gather(
            *(
                peers.send(NODE, metadata.API_KEY, 12, metadata.Request(topics=[]))
                for _ in range(20)
            ),
            peers.send(NODE, api_versions.API_KEY, 3, VERSIONS),
        )
        assert all(a.brokers for a in answers[:-1])
        assert answers[-1].error_code == 0
        assert len(peers._connections) == 1
    finally:
        await peers.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", "bob-secret")],
)
async def test_sasl_logins(served: Served, mechanism: str, user: str, password: str) -> None:
    good = PeerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, mechanism, user, password)
    peers = client(served, good)
    try:
        answer = await peers.send(NODE, metadata.API_KEY, 12, metadata.Request(topics=[]))
        assert [b.node_id for b in answer.brokers]
    finally:
        await peers.close()
    bad = PeerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, mechanism, user, "wrong")
    peers = client(served, bad)
    try:
        with pytest.raises(PeerAuthenticationError):
            await peers.send(NODE, metadata.API_KEY, 12, metadata.Request(topics=[]))
    finally:
        await peers.close()


@pytest.mark.integration
async def test_tls_checks_the_peer_with_the_listeners_truststore(served: Served) -> None:
    s = Settings(
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        inter_broker_listener_name="SSL",
        ssl_keystore_type="PEM",
        ssl_keystore_location=str(served.pki.server),
        ssl_truststore_type="PEM",
        ssl_truststore_location=str(served.pki.ca),
    )
    security = PeerSecurity.from_settings(s)
    assert security.ssl is not None and security.ssl.check_hostname
    peers = client(served, security)
    try:
        answer = await peers.send(NODE, metadata.API_KEY, 12, metadata.Request(topics=[]))
        assert answer.brokers
    finally:
        await peers.close()
    # Without the CA the peer's certificate does not verify: a connection error.
    untrusted = PeerSecurity.from_settings(
        Settings(listeners="SSL://127.0.0.1:9093", inter_broker_listener_name="SSL")
    )
    peers = client(served, untrusted)
    try:
        with pytest.raises(PeerConnectionError):
            await peers.send(NODE, metadata.API_KEY, 12, metadata.Request(topics=[]))
    finally:
        await peers.close()


@pytest.mark.integration
async def test_an_unknown_node_is_unavailable(served: Served) -> None:
    peers = client(served, PeerSecurity())
    try:
        with pytest.raises(PeerUnavailable):
            await peers.send(NODE + 1, api_versions.API_KEY, 3, VERSIONS)
    finally:
        await peers.close()


@pytest.mark.integration
async def test_a_silent_peer_times_out_then_the_client_reconnects(served: Served) -> None:
    peers = client(served, PeerSecurity(), request_timeout_ms=300)
    assert served.proc.proc is not None
    pid = served.proc.proc.pid
    try:
        await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
        first = peers._connections[NODE]
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(PeerTimeout):
                await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert first.closed and NODE not in peers._connections
        answer = await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
        assert answer.error_code == 0 and peers._connections[NODE] is not first
    finally:
        await peers.close()


async def _reset_before_the_read_loop_saw_it(proc: KgcProcess) -> None:
    nodes = [NodeAddress(NODE, "127.0.0.1", proc.port)]
    peers = PeerClient(lambda: nodes, PeerSecurity(), node_id=1)
    assert proc.proc is not None
    try:
        await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
        conn = peers._connections[NODE]
        # Stopped, the peer leaves a request unread; killed so, its kernel resets the
        # connection (not a FIN). The loop closes the transport at once; the read loop
        # learns it a turn or two later. A request sent in between must fail as a lost
        # connection: under uvloop the write raised RuntimeError, which the inter-broker
        # DescribeGroupHistory let through, and the worker closed its client's connection.
        os.kill(proc.proc.pid, signal.SIGSTOP)
        unanswered = asyncio.ensure_future(peers.send(NODE, api_versions.API_KEY, 3, VERSIONS))
        await asyncio.sleep(0.2)
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait()
        sent = [unanswered]
        while not conn.closed:  # a request each turn, until the reset is known
            assert len(sent) < 10_000, "the reset was never noticed"
            try:
                sent.append(conn.exchange(api_versions.API_KEY, 3, VERSIONS, peers.client_id))
            except PeerConnectionError:
                break
            await asyncio.sleep(0)
        assert conn.closed
        for future in sent:  # each one sent before fails as a lost connection
            with pytest.raises(PeerConnectionError):
                await future
        with pytest.raises(PeerConnectionError):  # nobody listens now
            await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
    finally:
        await peers.close()


@pytest.mark.integration
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_request_on_a_connection_just_reset_is_a_connection_error(
    tmp_path: Path, loop: str
) -> None:
    proc = KgcProcess(tmp_path / "data")
    proc.start()
    try:
        (uvloop.run if loop == "uvloop" else asyncio.run)(_reset_before_the_read_loop_saw_it(proc))
    finally:
        proc.stop()


@pytest.mark.integration
async def test_a_refused_connection_is_a_connection_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    nodes = [NodeAddress(NODE, "127.0.0.1", port)]
    peers = PeerClient(lambda: nodes, PeerSecurity(), node_id=1, reconnect_backoff_ms=10_000)
    try:
        with pytest.raises(PeerConnectionError):
            await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
        # Within reconnect.backoff.ms the same failure comes back without a new attempt.
        with pytest.raises(PeerConnectionError):
            await peers.send(NODE, api_versions.API_KEY, 3, VERSIONS)
    finally:
        await peers.close()


# -- the transaction channel over it (coordinator.cluster.txn_channel)


class Led:
    """Every partition led by ``node`` (None: no leader known)."""

    def __init__(self, node: NodeAddress | None) -> None:
        self.node = node

    def owner(self, topic: str, partition: int) -> NodeAddress | None:
        return self.node


@pytest.mark.integration
async def test_verification_goes_to_the_coordinators_node(served: Served) -> None:
    peers = client(served, PeerSecurity())
    node = served.nodes()[0]
    local_calls: list[str] = []

    def local(
        txn_id: str, pid: int, epoch: int, parts: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        local_calls.append(txn_id)
        return dict.fromkeys(parts, ErrorCode.NO_ERROR)

    def verifier(leader: NodeAddress | None, serves: bool) -> RoutedVerifier:
        return RoutedVerifier(
            1,
            lambda _: 0,
            lambda: Led(leader),
            lambda _: serves,
            peers,
            local,
            "__transaction_state",
        )

    parts = [("orders", 0), ("orders", 1)]
    try:
        # kgc's coordinator knows no such id: its verify-only answer, per partition.
        remote = await verifier(node, False).verify("unknown-id", 5, 0, parts)
        assert remote == dict.fromkeys(parts, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        assert await verifier(None, False).verify("x", 5, 0, parts) == dict.fromkeys(
            parts, ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
        gone = NodeAddress(NODE + 1, "127.0.0.1", 1)
        assert await verifier(gone, False).verify("x", 5, 0, parts) == dict.fromkeys(
            parts, ErrorCode.NETWORK_EXCEPTION
        )
        assert local_calls == []
        assert await verifier(None, True).verify("mine", 5, 0, parts) == dict.fromkeys(
            parts, ErrorCode.NO_ERROR
        )
        assert local_calls == ["mine"]
    finally:
        await peers.close()


@pytest.mark.integration
async def test_markers_go_to_each_leader(served: Served) -> None:
    peers = client(served, PeerSecurity())
    written: list[tuple[str, int]] = []

    async def write_local(topic: str, p: int, *_: object) -> ErrorCode:
        written.append((topic, p))
        return ErrorCode.NOT_LEADER_FOR_PARTITION

    marker = TxnMarker(5, 0, 3, True, (("no-such-topic", 0), ("no-such-topic", 1)))
    try:
        remote = ClusterMarkers(1, lambda: Led(served.nodes()[0]), peers, write_local)
        # The leader's own answer: the topic does not exist there (done for the sender).
        assert await remote.write_markers(marker) == dict.fromkeys(
            marker.partitions, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        gone = ClusterMarkers(
            1, lambda: Led(NodeAddress(NODE + 1, "127.0.0.1", 1)), peers, write_local
        )
        assert await gone.write_markers(marker) == dict.fromkeys(
            marker.partitions, ErrorCode.NETWORK_EXCEPTION
        )
        assert written == []
        here = ClusterMarkers(1, lambda: Led(None), peers, write_local)
        assert await here.write_markers(marker) == dict.fromkeys(
            marker.partitions, ErrorCode.NOT_LEADER_FOR_PARTITION
        )
        assert written == list(marker.partitions)
    finally:
        await peers.close()
