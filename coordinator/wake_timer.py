"""The one timer a coordinator shell keeps: fire a callback at the state machine's
next wake time (absolute epoch ms), re-armed after every call that may move it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class WakeTimer:
    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self.at: int | None = None

    def set(self, wake_ms: int | None) -> None:
        """Fire at ``wake_ms`` (None: never); a no-op when already set for that time."""
        if wake_ms == self.at:
            return
        self.cancel()
        self.at = wake_ms
        if wake_ms is None:
            return
        delay = max(0.0, (wake_ms - time.time() * 1000) / 1000)
        self._handle = asyncio.get_running_loop().call_later(delay, self._run)

    def set_no_later(self, wake_ms: int | None) -> None:
        """Fire at ``wake_ms`` at the latest: a timer already set earlier is kept, and
        fires early (for a state machine whose tick does nothing before a deadline,
        and whose next wake moves later with nearly every call: no timer re-armed
        per call)."""
        if self.at is not None and (wake_ms is None or self.at <= wake_ms):
            return
        self.set(wake_ms)

    def _run(self) -> None:
        self._handle = None
        self.at = None
        self._fire()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.at = None


class TaskSet:
    """Background tasks a shell starts and must cancel on stop. A task that ends with
    an exception is logged (nobody awaits these tasks, so it would go unnoticed)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task] = set()

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # also marks it retrieved: asyncio does not log it again
        if exc is not None:
            log.error("background task %s failed", task.get_name(),
                      exc_info=(type(exc), exc, exc.__traceback__))

    async def cancel_all(self, *extra: asyncio.Task | None) -> None:
        pending = [t for t in (*extra, *self.tasks) if t is not None]
        for task in pending:
            if not task.done():
                task.cancel()
        for task in pending:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
