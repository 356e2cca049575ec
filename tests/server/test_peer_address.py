"""A peer's address as Kafka sees it (Java's InetAddress.getHostAddress): ACL hosts are
compared with this text, and DescribeGroups reports it as the member's client host."""

from __future__ import annotations

import pytest

from coordinator.server.transport import java_host_address


@pytest.mark.parametrize(
    ("peer", "java"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("::1", "0:0:0:0:0:0:0:1"),
        ("2001:db8::ff00:42:8329", "2001:db8:0:0:0:ff00:42:8329"),
        ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("2001:DB8:0:0:0:0:0:1", "2001:db8:0:0:0:0:0:1"),
    ],
)
def test_peer_addresses_are_written_as_java_writes_them(peer: str, java: str) -> None:
    assert java_host_address(peer) == java
