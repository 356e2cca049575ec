"""Namespace mode's network: namespaces, bridge, addresses, iptables cuts, and cleanup.

Runs as root only (CI runs as root); a listener in node 1's namespace is reached from the
harness's namespace over the bridge, a DROP link cuts it, a RESET link refuses it, a LOSS
link of probability 1 loses every packet, ``pass`` heals it, and ``destroy``/``sweep`` leave no namespace of the run behind.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.jepsen import netns
from support.jepsen.proxy import DROP, PASS, RESET

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespace mode needs root"),
]

CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], 7000), timeout=1).close(); print('ok')\n"
    "except ConnectionRefusedError: print('refused')\n"
    "except OSError: print('timeout')\n"
)


def _connect(net: netns.Network) -> str:
    out = netns.in_ns(net.ns("cli"), sys.executable, "-c", CONNECT, net.ip_of("n1"))
    return out.stdout.strip()


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.split()}


def test_network_links_cut_heal_and_are_removed() -> None:
    subprocess.run(["scripts/ensure-jepsen-tools"], check=False)
    why = netns.available()
    if why is not None:
        pytest.skip(why)
    net = netns.Network(250)
    server = None
    try:
        net.create()
        assert {net.ns(r) for r in (*net.ROLES, "sw")} <= _namespaces()
        routes = netns.in_ns(net.ns("cli"), "ip", "route").stdout
        assert "default" not in routes and "10.213.250.0/24" in routes
        serve = "import socket,time\ns=socket.socket();s.bind(('0.0.0.0',7000));s.listen()\n"
        serve += "while True: s.accept()[0].close()\n"
        server = subprocess.Popen(
            ["ip", "netns", "exec", net.ns("n1"), sys.executable, "-c", serve]
        )
        link = netns.IptablesLink(net.ns("n1"), net.ip_of("cli"))
        for _ in range(50):  # the listener binds a moment after it starts
            if _connect(net) == "ok":
                break
        assert _connect(net) == "ok"
        link.set_mode(DROP)
        assert _connect(net) == "timeout"
        link.set_mode(RESET)
        assert _connect(net) == "refused"
        link.set_mode(PASS)
        assert _connect(net) == "ok"
        link.set_mode(netns.LOSS, 1.0)  # every packet lost
        assert _connect(net) == "timeout"
        link.set_mode(netns.LOSS, 0.2)
        rules = netns.in_ns(net.ns("n1"), "iptables", "-S", link.chain).stdout
        assert "--mode random --probability 0.2" in rules and "-j DROP" in rules
        link.set_mode(PASS)
        assert _connect(net) == "ok"
    finally:
        if server is not None:
            server.kill()
            server.wait()
        net.destroy()
    assert not {n for n in _namespaces() if n.startswith(f"{netns.PREFIX}250-")}


def test_sweep_removes_namespaces_of_a_dead_harness() -> None:
    if netns.available() is not None:
        pytest.skip(str(netns.available()))
    net = netns.Network(251)
    net.create()
    (netns.RUNS / "251").write_text("999999999")  # a harness that is gone
    removed = netns.sweep()
    assert net.ns("cli") in removed
    assert not {n for n in _namespaces() if n.startswith(f"{netns.PREFIX}251-")}
