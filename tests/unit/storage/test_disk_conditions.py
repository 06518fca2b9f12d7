"""DiskConditions (storage/disk_conditions.py) on an injected clock: an expected errno
starts a condition in one line and is counted, others are left to the caller; summaries
at most every 10 s; the condition ends only after QUIET_S without a refusal and once the
probe succeeds; retries back off while it lasts."""

from __future__ import annotations

import asyncio
import errno
import logging
import os

import pytest
from txbroker.storage import disk_conditions
from txbroker.storage.disk_conditions import DiskConditions
from txbroker.storage.manager import CHECKPOINT_FILES, LogManager

from tests.unit.storage.test_storage import append, make_batch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_a_few_lines_and_ends_when_space_is_back(tmp_path, caplog, monkeypatch):
    clock = Clock()
    disk = DiskConditions(str(tmp_path), clock=clock)
    free = [0]
    monkeypatch.setattr(disk, "free_space", lambda: (free[0], 64 << 20))
    with caplog.at_level(logging.INFO, logger="txbroker.storage.disk_conditions"):
        for _ in range(25):  # 25 refusals a second for 20 s
            for _ in range(25):
                assert disk.refused(_enospc(), "append to t-0", str(tmp_path / "t-0"))
            clock.now += 1
            asyncio.run(disk.tick())
        assert list(disk.active) == ["disk_full"]
        assert disk.refused_by_errno == {"ENOSPC": 625}
        clock.now += disk_conditions.QUIET_S + 1
        asyncio.run(disk.tick())
        assert disk.active  # quiet, but no space yet: still on
        free[0] = 50 << 20
        clock.now += 2
        asyncio.run(disk.tick())
        assert not disk.active
    lines = [r.getMessage() for r in caplog.records]
    # Start, a summary every 10 s, the refusals not summarized yet, the end: 5 lines in
    # 34 s for 625 refusals.
    assert len(lines) == 5, lines
    assert "append to t-0" in lines[0] and "t-0: [ENOSPC]" in lines[0] and "0 B free" in lines[0]
    assert "goes on: 249 more" in lines[1] and "500 refused write(s) (500 ENOSPC)" in lines[2]
    assert "ended after 34 s (625 occurrence(s))" in lines[4] and "50.0 MiB free" in lines[4]
    assert not any(r.exc_info for r in caplog.records)
    assert not (tmp_path / disk_conditions.PROBE_FILE).exists()


def test_an_unexpected_errno_is_left_to_the_caller(tmp_path):
    disk = DiskConditions(str(tmp_path))
    assert not disk.refused(OSError(errno.EMFILE, "Too many open files"), "append to t-0")
    assert not disk.refused(ValueError("not an OSError"), "markers")
    assert not disk.active and not disk.refused_by_errno


def test_each_expected_errno_is_its_condition(tmp_path):
    disk = DiskConditions(str(tmp_path))
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOTCONN):
        assert disk.refused(OSError(code, "x"), "checkpoint")
    assert sorted(disk.active) == ["disk_full", "io_error", "read_only"]


def test_retries_back_off_while_a_condition_lasts(tmp_path):
    clock = Clock()
    disk = DiskConditions(str(tmp_path), clock=clock)
    assert disk.retry_delay("marker", 0.1) == 0.1  # no condition: the caller's pause
    assert disk.retries == 0
    disk.refused(OSError(errno.EROFS, "Read-only file system"), "COMMIT marker to t-0")
    delays = [disk.retry_delay("marker", 0.1) for _ in range(7)]
    assert delays == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert disk.retry_delay("checkpoint", 5.0) == 5.0  # a longer pause is kept
    assert disk.retries == 8 and disk.active["read_only"].retries == 8
    clock.now += disk_conditions.QUIET_S + 1  # the directory is writable: it ends
    asyncio.run(disk.tick())
    assert not disk.active and disk.retry_delay("marker", 0.1) == 0.1


def test_a_lasting_cause_backs_off_without_a_condition(tmp_path):
    # A partition a failed fsync took offline stays so until a restart: its marker
    # retries back off although no disk condition is on; a healthy retry starts over.
    disk = DiskConditions(str(tmp_path), clock=Clock())
    delays = [disk.retry_delay("marker", 0.1, lasting=True) for _ in range(6)]
    assert delays == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert disk.retry_delay("marker", 0.1) == 0.1
    assert disk.retry_delay("marker", 0.1, lasting=True) == 0.2


def test_a_checkpoint_whose_fsync_failed_is_never_named(tmp_path, monkeypatch):
    """A failed fsync under a checkpoint (its file, or a segment index it relies on)
    leaves the old checkpoint in place and the recovery point where it was: an unclean
    start never trusts what that fsync covered. The next try, once fsyncs work, moves it."""
    data_dir = str(tmp_path / "data")
    checkpoint = os.path.join(data_dir, CHECKPOINT_FILES[0])
    real_fsync = os.fsync
    failing = {"on": False}

    def fsync(fd):
        if failing["on"]:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    async def run():
        logs = LogManager(data_dir, {"segment.bytes": "1000"})
        logs.open()
        await logs.start()
        logs.create_topic("t", 1)
        plog = logs.get_log("t", 0)
        for _ in range(3):  # rolls a segment: an index to fsync for the checkpoint
            append(plog, make_batch(5))
            await logs.flusher.wait_durable(plog, plog.log_end_offset)
        await logs.checkpoint_recovery_points()
        before_point, before_file = plog.recovery_point, open(checkpoint).read()
        append(plog, make_batch(5))
        await logs.flusher.wait_durable(plog, plog.log_end_offset)
        monkeypatch.setattr(os, "fsync", fsync)
        failing["on"] = True
        with pytest.raises(OSError):
            await logs.checkpoint_recovery_points()
        assert plog.recovery_point == before_point
        assert open(checkpoint).read() == before_file
        failing["on"] = False
        await logs.checkpoint_recovery_points()
        assert plog.recovery_point == plog.log_end_offset > before_point
        assert open(checkpoint).read() != before_file
        await logs.close()

    asyncio.run(run())
