"""TaskSet: the background tasks of a coordinator shell."""

from __future__ import annotations

import asyncio
import logging
import time

from txbroker.coordinator.wake_timer import TaskSet


def test_a_task_that_fails_is_logged_and_forgotten(caplog) -> None:
    async def main() -> TaskSet:
        tasks = TaskSet()

        async def fail() -> None:
            raise OSError(28, "No space left on device")

        async def ok() -> None:
            await asyncio.sleep(0)

        tasks.spawn(fail())
        tasks.spawn(ok())
        blocked = tasks.spawn(asyncio.Event().wait())
        await asyncio.sleep(0.01)
        assert tasks.tasks == {blocked}
        await tasks.cancel_all()
        return tasks

    with caplog.at_level(logging.ERROR, logger="txbroker.coordinator.wake_timer"):
        tasks = asyncio.run(main())
    assert not tasks.tasks
    [record] = [r for r in caplog.records if r.name == "txbroker.coordinator.wake_timer"]
    assert record.levelno == logging.ERROR and "failed" in record.getMessage()
    assert isinstance(record.exc_info[1], OSError)


def test_set_no_later_keeps_an_earlier_timer_and_takes_an_earlier_time() -> None:
    from txbroker.coordinator.wake_timer import WakeTimer

    async def main() -> list[float]:
        fired: list[float] = []
        loop = asyncio.get_running_loop()
        timer = WakeTimer(lambda: fired.append(loop.time()))
        now_ms = int(time.time() * 1000)
        timer.set_no_later(now_ms + 60_000)
        timer.set_no_later(now_ms + 120_000)  # later: the 60 s timer stays
        assert timer.at == now_ms + 60_000
        timer.set_no_later(None)  # none at all: kept too (it fires early, harmlessly)
        assert timer.at == now_ms + 60_000
        timer.set_no_later(now_ms + 20)  # earlier: taken
        assert timer.at == now_ms + 20
        await asyncio.sleep(0.2)
        assert timer.at is None
        timer.set_no_later(now_ms + 120_000)  # after firing: set again
        assert timer.at == now_ms + 120_000
        timer.cancel()
        return fired

    assert len(asyncio.run(main())) == 1
