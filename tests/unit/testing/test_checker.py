"""The chaos checker is sharp: each planted anomaly is reported by its name, a clean
history is clean (testing/chaos/checker.py)."""

from __future__ import annotations

import pytest
from txbroker.testing.chaos.checker import (
    ABORTED,
    COMMITTED,
    OPEN,
    InputRecord,
    LogRecord,
    Read,
    check,
    transaction_outcomes,
)

N = 6  # inputs per input partition


def _history():
    """A clean run: 2 input partitions, each input copied to output partition = input
    partition, in order, committed; one aborted attempt (ids i0-0, i0-1) before."""
    inputs = [InputRecord(f"i{p}-{k}", "in", p, k) for p in (0, 1) for k in range(N)]
    log, reads = [], []
    offsets = {0: 0, 1: 0}
    for p, k in [(0, 0), (0, 1)]:  # the aborted attempt
        log.append(LogRecord(f"i{p}-{k}", "out", p, offsets[p], ABORTED))
        offsets[p] += 1
    for record in inputs:
        p = record.partition
        log.append(LogRecord(record.id, "out", p, offsets[p], COMMITTED))
        reads.append(Read(record.id, "out", p, offsets[p], at=10.0 + offsets[p]))
        offsets[p] += 1
    return inputs, log, reads, {("in", 0): N, ("in", 1): N}


def test_a_clean_history_is_clean():
    inputs, log, reads, offsets = _history()
    report = check(inputs, log, reads, group_offsets=offsets,
                   commit_started={r.id: 0.0 for r in reads})
    assert report.ok, report.text()
    assert report.stats == {"inputs": 12, "log": 14, "reads": 12, "aborted": 2,
                            "unprocessed": 0}
    assert "no anomalies" in report.text()


def test_a_dropped_record_is_a_lost_write():
    inputs, log, reads, offsets = _history()
    reads = [r for r in reads if r.id != "i1-3"]
    report = check(inputs, log, reads, group_offsets=offsets)
    assert report.counts == {"lost-write": 1}
    assert report.anomalies["lost-write"][0]["id"] == "i1-3"


def test_a_duplicated_record_is_a_duplicate():
    inputs, log, reads, offsets = _history()
    reads.append(Read("i0-4", "out", 0, 99))
    report = check(inputs, log, reads, group_offsets=offsets)
    assert report.counts == {"duplicate": 1}
    assert report.anomalies["duplicate"][0] == {"id": "i0-4", "at": ["out-0@6", "out-0@99"]}


def test_a_reader_that_sees_an_aborted_record_is_a_g1a():
    inputs, log, reads, offsets = _history()
    reads.append(Read("i0-0", "out", 0, 0))  # the aborted attempt's first record
    report = check(inputs, log, reads, group_offsets=offsets)
    # Also a duplicate: the same input is committed later.
    assert report.counts == {"G1a": 1}
    assert report.anomalies["G1a"][0] == {"id": "i0-0", "at": "out-0@0"}


def test_a_reordered_record_is_nonmonotonic():
    inputs, log, reads, offsets = _history()
    swapped = {r.id: r for r in reads}
    a, b = swapped["i1-2"], swapped["i1-3"]
    swapped["i1-2"] = Read(a.id, a.topic, a.partition, b.offset)
    swapped["i1-3"] = Read(b.id, b.topic, b.partition, a.offset)
    report = check(inputs, log, list(swapped.values()), group_offsets=offsets)
    assert report.counts == {"nonmonotonic": 1}
    example = report.anomalies["nonmonotonic"][0]
    assert (example["after"]["id"], example["then"]["id"]) == ("i1-3", "i1-2")


def test_precommitted_reads_by_time_and_by_an_undecided_transaction():
    inputs, log, reads, offsets = _history()
    started = {r.id: 0.0 for r in reads} | {"i0-5": 100.0}  # seen at 13, committed at 100
    log.append(LogRecord("i1-0", "out", 1, 50, OPEN))
    reads.append(Read("i1-0", "out", 1, 50))
    report = check(inputs, log, reads, group_offsets=offsets, commit_started=started)
    assert report.counts == {"precommitted-read": 2}
    assert {e["id"] for e in report.anomalies["precommitted-read"]} == {"i0-5", "i1-0"}


def test_offsets_inconsistent_with_the_output():
    inputs, log, reads, _offsets = _history()
    # The group committed partition 0 only to 4: inputs 4 and 5 are in the output, so a
    # restart re-emits them; partition 1's offset is behind nothing.
    behind = check(inputs, log, reads, group_offsets={("in", 0): 4, ("in", 1): N})
    assert behind.counts == {"offsets-behind": 2}
    # Partition 1 has nothing in the output past offset 3, and the group says 6: lost;
    # partition 0 says 4 with nothing past 3 in the output: simply not processed yet.
    reads = [r for r in reads if r.id not in ("i1-4", "i1-5", "i0-4", "i0-5")]
    report = check(inputs, log, reads, group_offsets={("in", 0): 4, ("in", 1): N})
    assert report.counts == {"lost-write": 2}
    assert report.stats["unprocessed"] == 2


def test_unknown_ids():
    inputs, log, reads, offsets = _history()
    reads.append(Read("nobody", "out", 1, 77))
    assert check(inputs, log, reads, group_offsets=offsets).counts == {"unknown-id": 1}


@pytest.mark.parametrize("batches, expected", [
    # producer 7: a batch, then COMMIT; producer 8: a batch, ABORT; a plain batch between
    ([(0, 1, 7, True, None), (2, 2, 8, True, None), (3, 3, -1, False, None),
      (4, 4, 7, True, "COMMIT"), (5, 5, 8, True, "ABORT"), (6, 6, 7, True, None)],
     {0: "committed", 1: "committed", 2: "aborted", 3: "plain", 6: "open"}),
])
def test_transaction_outcomes_follow_the_markers(batches, expected):
    assert transaction_outcomes(batches) == expected


def test_output_from_an_aborted_input_is_a_g1a_and_order_can_be_waived():
    inputs, log, reads, offsets = _history()
    log.append(LogRecord("in-aborted-1", "out", 1, 60, COMMITTED))
    reads.append(Read("in-aborted-1", "out", 1, 60))
    report = check(inputs, log, reads, group_offsets=offsets, aborted_inputs={"in-aborted-1"})
    assert report.counts == {"G1a": 1}
    swapped = [Read(r.id, r.topic, r.partition, 100 - r.offset) for r in reads[:12]]
    assert check(inputs, log, swapped, group_offsets=offsets).counts.get("nonmonotonic")
    assert check(inputs, log, swapped, group_offsets=offsets, check_order=False).ok
