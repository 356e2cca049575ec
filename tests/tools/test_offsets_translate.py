"""``kgc offsets translate`` between two real ``kgc serve`` processes holding the same records
at other offsets (see ``support.translatekit``), both ways, with the bad inputs.

The first command runs as a subprocess (``run_cli``: the entry point itself), the others in
process (``translatekit.cli``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from support.clikit import run_cli
from support.groupkit import async_wait_until
from support.kgc_process import KgcProcess, free_port
from support.translatekit import OWN, cli, commit, committed, write_copies

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "orders"


@pytest.fixture
def second(tmp_path: Path) -> Iterator[KgcProcess]:
    proc = KgcProcess(tmp_path / "second")
    proc.start()
    yield proc
    if proc.alive():
        proc.stop()


def test_translate_both_ways_between_two_kgc_servers_and_bad_input(
    kgc: KgcProcess, second: KgcProcess
) -> None:
    a, b = kgc.bootstrap, second.bootstrap
    write_copies(a, b, TOPIC)
    # p0: the record 12 (b: 19); p1: the log end, after record 19 (b: 27); p2: before a's
    # log start, its records gone
    commit(a, "billing", TOPIC, {0: 12, 1: 20, 2: 3})

    plan = run_cli("offsets", "translate", "billing", "--to-bootstrap-server", b,
                   "--output", "json", "--bootstrap-server", a)  # fmt: skip
    assert plan.code == 0, plan
    got = plan.json()
    assert not got["executed"]
    assert [(o["partition"], o["source_offset"], o["new_offset"]) for o in got["offsets"]] == [
        (0, 12, 12 + OWN),
        (1, 20, 20 + OWN),
    ]
    assert [(u["partition"], u["source_offset"]) for u in got["unplaced"]] == [(2, 3)]
    assert "before the source's log start offset 5" in got["unplaced"][0]["reason"]
    assert committed(b, "billing") == {}  # a dry run changes nothing

    done = cli(a, "offsets", "translate", "billing", "--to-bootstrap-server", b, "--execute")
    assert done.code == 0, done
    assert "TOPIC" in done.out and "SOURCE-OFFSET" in done.out
    assert "orders-2 (source offset 3) was not placed" in done.err
    assert committed(b, "billing") == {(TOPIC, 0): 19, (TOPIC, 1): 27}

    # the other way: b's record 12 is a's offset 12; b's own records (p1) and its records
    # a has dropped (p2: record 0) have no copy on a
    commit(b, "audit", TOPIC, {0: 19, 1: 3, 2: OWN})
    back = cli(b, "offsets", "translate", "audit", "--to-bootstrap-server", a,
               "--output", "json", "--execute")  # fmt: skip
    assert back.code == 0, back
    got = back.json()
    assert [(o["partition"], o["new_offset"]) for o in got["offsets"]] == [(0, 12)]
    reasons = {u["partition"]: u["reason"] for u in got["unplaced"]}
    assert set(reasons) == {1, 2}
    assert all("no record on the target matches" in r for r in reasons.values()), reasons
    assert committed(a, "audit") == {(TOPIC, 0): 12}

    # --topic narrows the partitions
    only = cli(a, "offsets", "translate", "billing", "--to-bootstrap-server", b,
               "--topic", f"{TOPIC}:1", "--output", "json")  # fmt: skip
    assert [o["partition"] for o in only.json()["offsets"]] == [1]

    _bad_input_changes_nothing(a, b)


def _bad_input_changes_nothing(a: str, b: str) -> None:
    """An unknown group, an unreachable target, a group with a member on the target: one
    line each, and the target's offsets stay as they are."""
    commit(b, "billing", TOPIC, {0: 8, 1: 9})
    unknown = cli(a, "offsets", "translate", "nobody", "--to-bootstrap-server", b, "--execute")
    unknown.assert_clean_error(1)
    assert "'nobody' does not exist" in unknown.err

    closed = f"127.0.0.1:{free_port()}"
    gone = cli(a, "offsets", "translate", "billing", "--to-bootstrap-server", closed,
               "--execute", "--timeout", "3")  # fmt: skip
    gone.assert_clean_error(3)
    assert closed in gone.err and "Connection refused" in gone.err
    assert "command-config" not in gone.err  # nobody listens: no hint of a secured listener
    # A target that closes a plaintext client at once, as a TLS or SASL listener does: the
    # hint names the target's own option.
    with _closing_listener() as secured:
        cut = cli(a, "offsets", "translate", "billing", "--to-bootstrap-server", secured,
                  "--execute", "--timeout", "3")  # fmt: skip
    cut.assert_clean_error(3)
    assert secured in cut.err and "give its settings with --to-command-config" in cut.err

    async def with_member() -> None:
        member = AIOKafkaConsumer(
            TOPIC, bootstrap_servers=b, group_id="billing", enable_auto_commit=False,
            heartbeat_interval_ms=300,
        )  # fmt: skip
        await member.start()
        try:
            await async_wait_until(lambda: bool(member.assignment()), what="member assigned")
            busy = await asyncio.to_thread(
                cli, a, "offsets", "translate", "billing", "--to-bootstrap-server", b, "--execute"
            )
            busy.assert_clean_error(1)
            assert "without active members" in busy.err
        finally:
            await member.stop()

    bad = cli(a, "offsets", "translate", "billing", "--to-bootstrap-server", b, "--execute",
              "--to-command-config", "/nonexistent/client.properties")  # fmt: skip
    bad.assert_clean_error(2)
    assert "--to-command-config: cannot read" in bad.err

    asyncio.run(with_member())
    assert committed(b, "billing") == {(TOPIC, 0): 8, (TOPIC, 1): 9}


@contextlib.contextmanager
def _closing_listener() -> Iterator[str]:
    """A listener that closes each connection once it has read a request."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # the loop sees ``stop``
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        server.close()
