"""``Pending``: the group runtime's future, whose done-callbacks run inside ``set_result``.

The transport treats it as it treats an ``asyncio.Future`` (``handler``: the contract); what
differs is when callbacks run: synchronously, not one loop hop later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from coordinator.server.handler import Deferred, Pending


def test_callbacks_run_inside_set_result_in_the_order_added() -> None:
    p = Pending()
    seen: list[tuple[str, Any]] = []
    p.add_done_callback(lambda f: seen.append(("a", f.result())))
    p.add_done_callback(lambda f: seen.append(("b", f.result())))
    assert not p.done() and seen == []
    p.set_result(42)
    assert seen == [("a", 42), ("b", 42)]  # before set_result returned: no loop involved
    assert p.done() and not p.cancelled() and p.exception() is None


def test_a_callback_added_to_a_done_pending_runs_at_once() -> None:
    p = Pending()
    p.set_result("answer")
    seen: list[object] = []
    p.add_done_callback(lambda f: seen.append(f.result()))
    assert seen == ["answer"]


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = Pending()
    seen: list[int] = []

    def bad(_: Pending) -> None:
        raise RuntimeError("boom")

    p.add_done_callback(bad)
    p.add_done_callback(lambda f: seen.append(f.result()))
    with caplog.at_level(logging.ERROR, logger="kgc.server"):
        p.set_result(7)
    assert seen == [7]
    assert any("boom" in (r.exc_text or "") for r in caplog.records)


def test_exception_cancel_and_states() -> None:
    p = Pending()
    with pytest.raises(asyncio.InvalidStateError):
        p.result()
    err = ValueError("bad")
    p.set_exception(err)
    assert p.exception() is err
    with pytest.raises(ValueError):
        p.result()
    with pytest.raises(asyncio.InvalidStateError):
        p.set_result(1)
    assert not p.cancel()  # done already

    c = Pending()
    seen: list[bool] = []
    c.add_done_callback(lambda f: seen.append(f.cancelled()))
    assert c.cancel() and seen == [True]
    with pytest.raises(asyncio.CancelledError):
        c.result()
    with pytest.raises(asyncio.CancelledError):
        c.exception()


async def test_awaiting_gives_the_result_or_raises() -> None:
    p = Pending()
    asyncio.get_running_loop().call_soon(p.set_result, "later")
    assert await Deferred(p) == "later"
    done = Pending()
    done.set_result("now")
    assert await done == "now"
    failing = Pending()
    asyncio.get_running_loop().call_soon(failing.set_exception, KeyError("k"))
    with pytest.raises(KeyError):
        await failing


async def test_an_awaiting_task_cancelled_cancels_the_pending() -> None:
    p = Pending()
    task = asyncio.ensure_future(asyncio.wait_for(Deferred(p), 5))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert p.cancelled()
