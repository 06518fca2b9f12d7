"""The data directory's file system as a few named conditions: ``disk_full`` (ENOSPC,
EDQUOT), ``read_only`` (EROFS) and ``io_error`` (EIO, ENOTCONN: a bad disk, a file
system gone).

A write refused with one of these errnos is expected, not a bug: whoever tried it
(an append, a marker, a checkpoint, a coordinator's record) reports it here with
:meth:`DiskConditions.refused` instead of logging it, and answers its client as before
(KAFKA_STORAGE_ERROR, NOT_COORDINATOR, a retry later). Each condition is logged through
a :class:`ConditionLog`: one line when it starts (which path, what failed, how much
space is free), a summary at most every 10 s while it lasts (refused writes by errno,
retries), one line when it ends; no traceback. Retries of the broker's own writes ask
:meth:`retry_delay` how long to wait, which grows while a condition lasts.

A condition ends when nothing was refused for ``QUIET_S`` and a probe says the cause
is gone (space free again, the directory writable, a small file written and fsynced),
checked by :meth:`tick` (the LogManager's checkpoint loop) about once a second. Failed fsyncs are not conditions of this
kind: they take their partition offline until a restart (storage/flusher.py); the
offline partitions are counted with the conditions for /health and the console.

Owned by the LogManager (``logs.disk``); read by broker/metrics.py, the admin
endpoint's /health and the console's banner. Not thread-safe: call it on the loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from .condition_log import ConditionLog

log = logging.getLogger(__name__)

# errno -> the condition it means. Anything else is not expected: its caller logs it.
EXPECTED = {errno.ENOSPC: "disk_full", errno.EDQUOT: "disk_full",
            errno.EROFS: "read_only", errno.EIO: "io_error", errno.ENOTCONN: "io_error"}
CONDITIONS = ("disk_full", "read_only", "io_error")
_WHAT = {"disk_full": "data directory full: writes refused",
         "read_only": "data directory read-only: writes refused",
         "io_error": "data directory failing: writes refused"}
QUIET_S = 6.0  # a condition ends only after this long without a refused write (longer
# than the retries' longest pause, so that a condition is not ended between two of them)
PROBE_INTERVAL_S = 1.0
# disk_full ends only with this much free: a few bytes freed by retention would
# otherwise end it only for the next large batch to start it again.
FREE_TO_CLEAR = 1 << 20
RETRY_BACKOFF_MAX_S = 2.0
PROBE_FILE = ".txbroker_probe"


@dataclass
class ActiveCondition:
    """What /health and the console show of a condition while it lasts."""

    condition: str
    path: str
    detail: str
    since: float  # wall clock, for display
    refused: int = 0
    retries: int = 0


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # (unreachable)


class DiskConditions:
    def __init__(self, data_dir: str, *, clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger = log) -> None:
        self.data_dir = data_dir
        self._clock = clock
        self._logs = {c: ConditionLog(logger, _WHAT[c], clock=clock) for c in CONDITIONS}
        self.active: dict[str, ActiveCondition] = {}
        self.refused_by_errno: dict[str, int] = {}  # since the start, for /metrics
        self.retries = 0  # since the start
        self._last_refused: dict[str, float] = {}
        self._backoff: dict[str, float] = {}  # per kind of retry, while a condition lasts
        self._next_probe = 0.0

    def free_space(self) -> tuple[int, int] | None:
        """(free bytes for an unprivileged writer, total bytes) of the data directory's
        file system, or None if it cannot be asked (it is gone)."""
        try:
            st = os.statvfs(self.data_dir)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

    def _space_text(self) -> str:
        space = self.free_space()
        if space is None:
            return f"{self.data_dir}: statvfs failed"
        return f"{_size(space[0])} free of {_size(space[1])} on {self.data_dir}"

    def refused(self, error: BaseException, what: str, path: str | None = None) -> bool:
        """``what`` (e.g. "append to orders-0", "checkpoint") failed with ``error``. If
        its errno is an expected one, count and log it as its condition and return True;
        otherwise return False, and the caller logs it as before."""
        code = getattr(error, "errno", None)
        condition = EXPECTED.get(code) if code is not None else None
        if condition is None:
            return False
        name = errno.errorcode.get(code, str(code))
        self.refused_by_errno[name] = self.refused_by_errno.get(name, 0) + 1
        path = getattr(error, "filename", None) or path or self.data_dir
        now = self._clock()
        self._last_refused[condition] = now
        state = self.active.get(condition)
        if state is None:
            state = self.active[condition] = ActiveCondition(
                condition, str(path), f"{what}: {error.strerror or error}", time.time())
            self._next_probe = now + QUIET_S
        state.refused += 1
        state.path, state.detail = str(path), f"{what}: {error.strerror or error}"
        # The first line says where and how much space is left; a summary's "latest"
        # carries the counts so far (refused writes by errno, retries).
        self._logs[condition].occurred(
            f"{what}: {path}: [{name}] {error.strerror or error}; {self._space_text()}; "
            f"{state.refused} refused write(s) ({self._by_errno()}), {state.retries} "
            f"retry(ies) so far", what.split(" to ")[0])
        return True

    def _by_errno(self) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(self.refused_by_errno.items()))

    def retry_delay(self, kind: str, base: float, *, lasting: bool = False) -> float:
        """How long a retry of the broker's own write (``kind``: "marker", "checkpoint")
        waits: ``base`` while no condition lasts, else doubling per retry up to
        RETRY_BACKOFF_MAX_S (or ``base`` if longer; reset when the conditions end). Counts
        the retry. ``lasting``: the caller knows its cause lasts without a condition
        here (a partition a failed fsync took offline until a restart): back off too."""
        if not self.active:
            if not lasting:
                self._backoff.pop(kind, None)
                return base
            delay = min(self._backoff.get(kind, base) * 2, max(RETRY_BACKOFF_MAX_S, base))
            self._backoff[kind] = delay
            return delay
        self.retries += 1
        for state in self.active.values():
            state.retries += 1
        delay = min(self._backoff.get(kind, base) * 2, max(RETRY_BACKOFF_MAX_S, base))
        self._backoff[kind] = delay
        return delay

    @property
    def degraded(self) -> bool:
        return bool(self.active)

    async def tick(self) -> None:
        """Summaries due, and the end of conditions whose cause is gone (call it a few
        times a second; it probes at most once per PROBE_INTERVAL_S, in a worker thread:
        a file system that hangs must not stop the event loop)."""
        if not self.active:
            return
        for condition in self.active:
            self._logs[condition].tick()
        now = self._clock()
        if now < self._next_probe:
            return
        self._next_probe = now + PROBE_INTERVAL_S
        candidates = [c for c in self.active if now - self._last_refused.get(c, 0.0) >= QUIET_S]
        if not candidates:
            return
        loop = asyncio.get_running_loop()
        gone = await loop.run_in_executor(None, lambda: [self._probe(c) for c in candidates])
        for condition, why in zip(candidates, gone, strict=True):
            # (a write refused while the probe ran keeps it on)
            if why is None or condition not in self.active \
                    or self._last_refused.get(condition, 0.0) > now:
                continue
            del self.active[condition]
            self._logs[condition].cleared(why)
        if not self.active:
            self._backoff.clear()

    def _probe(self, condition: str) -> str | None:
        """Why ``condition``'s cause is gone, or None if it is not."""
        if condition == "disk_full":
            space = self.free_space()
            if space is None or space[0] < FREE_TO_CLEAR:
                return None
        # A small file written, fsynced and removed: the directory takes writes again
        # (a read-only remount undone, a file system back).
        path = os.path.join(self.data_dir, PROBE_FILE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"txbroker write probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.unlink(path)
        except OSError:
            return None
        return f"writes succeed again; {self._space_text()}"
