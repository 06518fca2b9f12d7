"""The fsync helper process behind the flusher (storage/fsync_helper.py, ProcessFsyncPool).

Real processes and files: the pool starts the helper, passes it file descriptors,
and must never report a round durable that was not fsynced, also when the helper
dies or cannot start.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time

import pytest
from txbroker.storage import flusher
from txbroker.storage.flusher import ProcessFsyncPool


def _file_fds(tmp_path, n: int) -> list[int]:
    fds = []
    for i in range(n):
        fd = os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"x" * 100)
        fds.append(fd)
    return fds


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as e:
        return e.errno == errno.EBADF
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0: look at its state.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


async def _run(pool: ProcessFsyncPool, jobs: list[list[int]], timeout: float = 10):
    return await asyncio.wait_for(pool.run(asyncio.get_running_loop(), jobs), timeout)


def test_rounds_are_fsynced_by_the_helper_and_fds_closed_after_the_answer(tmp_path, monkeypatch):
    fsynced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: fsynced.append(fd))  # this process must not

    async def main():
        pool = ProcessFsyncPool(2)
        try:
            assert pool.pid is not None and _alive(pool.pid)
            for _ in range(3):
                jobs = [_file_fds(tmp_path, 2), _file_fds(tmp_path, 1), []]
                assert await _run(pool, jobs) == [None, None, None]
                assert all(_closed(fd) for job in jobs for fd in job)
            return pool.pid
        finally:
            pool.shutdown(wait=True)

    pid = asyncio.run(main())
    assert fsynced == []  # every fsync ran in the helper
    assert not _alive(pid)  # shutdown(wait=True) reaped it


def test_an_fsync_error_is_reported_for_its_job_only(tmp_path):
    async def main():
        pool = ProcessFsyncPool(2)
        try:
            r, w = os.pipe()  # fsync of a pipe fails with EINVAL
            good = _file_fds(tmp_path, 1)
            errors = await _run(pool, [good, [r, w]])
            assert errors[0] is None
            assert isinstance(errors[1], OSError) and errors[1].errno == errno.EINVAL
            assert _closed(r) and _closed(w) and _closed(good[0])
        finally:
            pool.shutdown(wait=True)

    asyncio.run(main())


def test_a_dead_helper_is_replaced_by_threads_and_its_unanswered_jobs_redone(tmp_path, caplog,
                                                                             monkeypatch):
    in_threads: list[int] = []
    real_sync = flusher._sync_and_close

    def counting(fds):
        in_threads.extend(fds)
        real_sync(fds)

    monkeypatch.setattr(flusher, "_sync_and_close", counting)

    async def main():
        pool = ProcessFsyncPool(2)
        try:
            pid = pool.pid
            os.kill(pid, signal.SIGSTOP)  # sent to it, never answered...
            jobs = [_file_fds(tmp_path, 2)]
            pending = pool.run(asyncio.get_running_loop(), jobs)
            await asyncio.sleep(0.05)
            assert not pending.done()
            os.kill(pid, signal.SIGKILL)  # ...then it dies
            assert await asyncio.wait_for(pending, 10) == [None]
            assert in_threads == jobs[0]  # fsynced again, here
            # Later rounds go to threads straight away.
            more = [_file_fds(tmp_path, 1)]
            assert await _run(pool, more) == [None]
            assert in_threads == jobs[0] + more[0]
            assert pool.pid is None
        finally:
            pool.shutdown(wait=True)

    with caplog.at_level(logging.ERROR, logger="txbroker.storage.flusher"):
        asyncio.run(main())
    assert "fsync helper process: it exited; fsyncing in threads from now on" in caplog.text


def test_threads_when_the_helper_cannot_start(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(flusher.sys, "executable", str(tmp_path / "no-such-python"))

    async def main():
        pool = ProcessFsyncPool(2)
        try:
            assert pool.pid is None
            assert await _run(pool, [_file_fds(tmp_path, 2)]) == [None]
        finally:
            pool.shutdown(wait=True)

    with caplog.at_level(logging.WARNING, logger="txbroker.storage.flusher"):
        asyncio.run(main())
    assert "fsync helper process not started" in caplog.text


def test_the_helper_ignores_ctrl_c_and_leaves_with_the_broker(tmp_path):
    async def main():
        pool = ProcessFsyncPool(1)
        pid = pool.pid
        assert await _run(pool, [_file_fds(tmp_path, 1)]) == [None]  # up and serving
        os.kill(pid, signal.SIGINT)  # a Ctrl-C in the terminal is the broker's to handle
        await asyncio.sleep(0.1)
        assert _alive(pid)
        assert await _run(pool, [_file_fds(tmp_path, 1)]) == [None]
        pool.shutdown(wait=False)  # the broker's end closes: the helper exits by itself
        return pid

    pid = asyncio.run(main())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


@pytest.mark.parametrize("workers", [1, 4])
def test_many_rounds_in_flight_each_get_their_own_answer(tmp_path, workers):
    async def main():
        pool = ProcessFsyncPool(workers)
        try:
            loop = asyncio.get_running_loop()
            rounds = [[_file_fds(tmp_path, 1) for _ in range(k % 3 + 1)] for k in range(30)]
            futures = [pool.run(loop, jobs) for jobs in rounds]
            results = await asyncio.wait_for(asyncio.gather(*futures), 20)
            assert results == [[None] * len(jobs) for jobs in rounds]
            assert all(_closed(fd) for jobs in rounds for job in jobs for fd in job)
        finally:
            pool.shutdown(wait=True)

    asyncio.run(main())


def test_a_round_with_more_fds_than_one_message_carries(tmp_path):
    # SCM_RIGHTS takes at most 253 fds per message: a big round (a segment roll in many
    # partitions at once) is split, and still answered once, job by job.
    async def main():
        pool = ProcessFsyncPool(2)
        try:
            jobs = [_file_fds(tmp_path, 1) for _ in range(3)]
            jobs += [[os.dup(jobs[0][0]) for _ in range(120)] for _ in range(3)]  # 360 fds
            assert await _run(pool, jobs) == [None] * len(jobs)
            assert all(_closed(fd) for job in jobs for fd in job)
            assert pool.pid is not None  # still the helper's work
        finally:
            pool.shutdown(wait=True)

    asyncio.run(main())
