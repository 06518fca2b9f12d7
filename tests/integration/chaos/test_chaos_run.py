"""``txbroker.chaos.run``: the sample pipeline under fire checks clean, the broken
variants are caught (marked ``chaos``: `make test-chaos`, not `make test`: ~75 s)."""

from __future__ import annotations

import sys

import pytest

from txbroker.chaos import run
from txbroker.cli import main

SAMPLE = [sys.executable, "-m", "txbroker.testing.chaos.sample_pipeline"]


# Strikes beside the zombies: none (the zombie tests below).
ZOMBIES_ONLY = {"instance_kills": False, "broker_crashes": False, "power_loss": False,
                "faults": "none", "clean_restarts": False, "hangs": False}


@pytest.mark.chaos
def test_the_sample_pipeline_survives_kills_crashes_and_faults(tmp_path):
    """Seed 367 draws every kind of strike early, the slow ones (a clean restart, a
    crash) after the quick ones (hangs, faults, a kill, a zombie): wall-clock drift does
    not push them past the end. (Its replacement's InitProducerId fences the zombie.)"""
    report = run(SAMPLE, input="orders", output="payments", instances=2, duration=16,
                 records=400, interval=1.0, seed=367, data_dir=str(tmp_path))
    assert report.ok, report.text()
    # (every input in the log, read once: a fatal error of the feeder's producer can
    # leave a few of the 400 unwritten, its restarts are in the timeline)
    assert report.check.stats["reads"] == report.records >= 300
    struck = {"instance kill", "broker crash", "clean restart", "broker hang",
              "instance pause", "request fault"}
    assert struck <= set(report.counts), report.text()  # it was under fire


@pytest.mark.chaos
def test_zombies_of_the_sample_pipeline_are_fenced(tmp_path):
    """Paused instances resumed beside their replacements: each is fenced (a stable
    transactional.id, static group membership) and exits; nothing is emitted twice."""
    report = run(SAMPLE, input="orders", output="payments", instances=1, duration=8,
                 records=200, interval=2.0, seed=0, data_dir=str(tmp_path), **ZOMBIES_ONLY)
    assert report.ok, report.text()
    assert report.counts.get("zombie", 0) >= 1 and report.counts.get("zombie exit", 0) >= 1, \
        report.text()


@pytest.mark.chaos
def test_a_pipeline_that_produces_before_it_is_fenced_is_caught(tmp_path):
    """--unfenced: a transactional.id new on every start, partitions assigned by hand.
    Seed 0 pauses the instance once it has been processing for seconds, and resumes it
    while the feeder still feeds: the zombie processes again what its replacement did."""
    report = run([*SAMPLE, "--unfenced"], input="orders", output="payments", instances=1,
                 duration=8, records=200, interval=2.0, seed=0, data_dir=str(tmp_path),
                 **ZOMBIES_ONLY)
    assert not report.ok
    assert report.check.counts.get("duplicate", 0) > 0, report.text()
    assert "instance pause" in report.counts and "zombie" in report.counts


@pytest.mark.chaos
def test_a_read_uncommitted_pipeline_is_caught(tmp_path):
    report = run([*SAMPLE, "--read-uncommitted"], input="orders", output="payments",
                 instances=1, duration=4, records=100, aborted_records=5, seed=3,
                 data_dir=str(tmp_path))
    assert not report.ok
    assert report.check.counts == {"G1a": 5}, report.text()


@pytest.mark.chaos
def test_a_pipeline_without_idempotence_or_transactions_is_caught(tmp_path):
    """Lost Produce answers (retried: appended twice) and instance kills (delivered but
    not committed: produced again) duplicate its output. (The faults let the feeder's
    requests through: they fall on the pipeline's.)"""
    report = run([*SAMPLE, "--no-idempotence"], input="orders", output="payments",
                 instances=2, duration=12, records=400, interval=1.0, seed=7,
                 faults="lost_answers", broker_crashes=False, power_loss=False,
                 clean_restarts=False, hangs=False, zombies=False, data_dir=str(tmp_path))
    assert not report.ok
    assert report.check.counts.get("duplicate", 0) > 0, report.text()


def test_the_command_needs_a_pipeline(capsys):
    assert main(["chaos", "--input", "a", "--output", "b"]) == 2
    assert "give the pipeline command after --" in capsys.readouterr().err
