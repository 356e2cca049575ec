"""The security metrics of a real ``kgc serve``: connections per listener, SASL
authentications by result, authorization denials by API and resource type.

How this works: kgc listens on PLAINTEXT and SASL_SSL (SCRAM-SHA-512, a user added offline,
certificates made here) with the StandardAuthorizer and no ACLs. A raw client
(bench/aioclient.py, the benchmarks' SASL client) authenticates, fails with a wrong
password, and sends requests its principal may not make; each step is followed by a scrape
of ``/metrics`` that must show the series move by exactly that much.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from aioclient import AsyncConn, AuthenticationFailed, Security
from prometheus_client.parser import text_string_to_metric_families
from support.certkit import make_pki
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess, free_port

from protocol.errors import ErrorCode
from protocol.messages import describe_acls, heartbeat

pytestmark = pytest.mark.integration
USER, PASSWORD = "bob", "bob-secret"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(kgc: KgcProcess) -> Samples:
    url = f"http://127.0.0.1:{kgc.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class SecureKgc:
    def __init__(self, proc: KgcProcess, port: int, tls: ssl.SSLContext) -> None:
        self.proc = proc
        self.port = port
        self.tls = tls

    def security(self, password: str = PASSWORD) -> Security:
        return Security(self.tls, "SCRAM-SHA-512", USER, password)


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKgc]:
    base = tmp_path_factory.mktemp("metrics-security")
    pki = make_pki(base / "pki")
    data = base / "data"
    subprocess.run(
        [sys.executable, "-m", "coordinator", "users", "add", "--data-dir", str(data),
         "--mechanism", "SCRAM-SHA-512", "--password", PASSWORD, USER],
        check=True,
    )  # fmt: skip
    port, sasl_ssl_port = free_port(), free_port()
    proc = KgcProcess(
        data,
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "--ssl-keystore-type",
        "PEM",
        "--ssl-keystore-location",
        str(pki.server),
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-512",
        "--authorizer-class-name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--super-users",
        "User:admin",
        port=port,
    )
    proc.start()
    try:
        yield SecureKgc(proc, sasl_ssl_port, ssl.create_default_context(cafile=str(pki.ca)))
    finally:
        proc.stop()


def auths(s: Samples, result: str) -> float:
    return value(
        s,
        "kgc_authentications_total",
        listener="SASL_SSL",
        mechanism="SCRAM-SHA-512",
        result=result,
    )


def denied(s: Samples, api: str, resource_type: str) -> float:
    return value(s, "kgc_authorization_denied_total", api=api, resource_type=resource_type)


def connections(s: Samples, listener: str) -> float | None:
    return s.get(("kgc_connections", (("listener", listener),)))


async def test_security_series_move(kgc: SecureKgc) -> None:
    before = scrape(kgc.proc)
    # Every listener has its series, idle ones at 0.
    assert connections(before, "SASL_SSL") == 0
    assert connections(before, "PLAINTEXT") is not None

    conn = await AsyncConn.open("127.0.0.1", kgc.port, "metrics", kgc.security())
    try:
        after_login = scrape(kgc.proc)
        assert auths(after_login, "success") == auths(before, "success") + 1
        assert auths(after_login, "failure") == auths(before, "failure")
        assert connections(after_login, "SASL_SSL") == 1

        with pytest.raises(AuthenticationFailed):
            await AsyncConn.open("127.0.0.1", kgc.port, "metrics", kgc.security("wrong"))
        after_failure = scrape(kgc.proc)
        assert auths(after_failure, "failure") == auths(before, "failure") + 1
        assert auths(after_failure, "success") == auths(after_login, "success")

        # bob has no ACLs: READ on the group and CLUSTER DESCRIBE are denied, each counted
        # under its API once per denied request.
        for _ in range(2):
            hb = await conn.call(
                heartbeat.API_KEY,
                4,
                heartbeat.Request(group_id="g", generation_id=1, member_id="m"),
            )
            assert hb.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        acls = await conn.call(
            describe_acls.API_KEY,
            3,
            describe_acls.Request(
                resource_type_filter=1,  # ANY
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                permission_type=1,
                operation=1,
            ),
        )
        assert acls.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        after_denials = scrape(kgc.proc)
        assert (
            denied(after_denials, "Heartbeat", "GROUP") == denied(before, "Heartbeat", "GROUP") + 2
        )
        assert (
            denied(after_denials, "DescribeAcls", "CLUSTER")
            == denied(before, "DescribeAcls", "CLUSTER") + 1
        )
    finally:
        await conn.close()

    async def closed() -> bool:
        s = await asyncio.to_thread(scrape, kgc.proc)
        return connections(s, "SASL_SSL") == 0

    await async_wait_until(closed, what="the SASL_SSL connection counted as closed")
