"""TaskSet: the background tasks of a coordinator shell."""

from __future__ import annotations

import asyncio
import logging

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
