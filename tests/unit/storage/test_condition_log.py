"""ConditionLog (issue 42): a lasting failure is a few log lines, not one per attempt."""

from __future__ import annotations

import logging

from txbroker.storage.condition_log import ConditionLog


def test_a_lasting_condition_is_one_line_a_summary_per_interval_and_an_end(caplog):
    now = [100.0]
    cond = ConditionLog(logging.getLogger("txbroker.storage.test"), "fsync failed",
                        interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="txbroker.storage.test"):
        for i in range(28_000):  # a hot loop's worth of failures over 25 s
            now[0] = 100.0 + i * 25 / 28_000
            cond.occurred(f"t-{i % 3}: [Errno 107] Transport endpoint is not connected",
                          f"t-{i % 3}")
            cond.tick()
        cond.cleared("fine again", quiet=10.0)  # too soon: still failing a moment ago
        assert cond.active
        now[0] += 11
        cond.tick()  # what came since the last summary
        cond.cleared("fine again", quiet=10.0)
        assert not cond.active
        cond.cleared("again")  # over: nothing more
    lines = [r.getMessage() for r in caplog.records]
    # The start, summaries at 110 s and 120 s, the rest at 136 s, the end.
    assert len(lines) == 5, lines
    assert lines[0].startswith("fsync failed: t-0: [Errno 107]")
    assert "goes on:" in lines[1] and "(t-1, t-2, t-0)" in lines[1]
    assert lines[-1].startswith("fsync failed ended after") and "28000 occurrence(s)" in lines[-1]
    assert not any(r.exc_info for r in caplog.records)


def test_a_new_condition_after_the_end_starts_with_its_own_line(caplog):
    now = [0.0]
    cond = ConditionLog(logging.getLogger("txbroker.storage.test"), "checkpoints failed",
                        clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="txbroker.storage.test"):
        cond.occurred("EIO")
        cond.occurred("EIO")
        now[0] = 3
        cond.cleared()  # the second occurrence is summarized first
        cond.occurred("ENOSPC")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and "goes on: 1 more" in lines[1] and "ended" in lines[2]
    assert lines[3] == "checkpoints failed: ENOSPC"
