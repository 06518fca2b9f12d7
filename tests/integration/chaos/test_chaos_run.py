"""``txbroker.chaos.run``: the sample pipeline under fire checks clean, a broken variant
is caught (marked ``chaos``: `make test-chaos`, not `make test`: ~30 s)."""

from __future__ import annotations

import sys

import pytest

from txbroker.chaos import run
from txbroker.cli import main

SAMPLE = [sys.executable, "-m", "txbroker.testing.chaos.sample_pipeline"]


@pytest.mark.chaos
def test_the_sample_pipeline_survives_kills_crashes_and_faults(tmp_path):
    report = run(SAMPLE, input="orders", output="payments", instances=2, duration=12,
                 records=400, interval=1.0, seed=7, data_dir=str(tmp_path))
    assert report.ok, report.text()
    assert report.check.stats["reads"] == 400
    assert sum(report.counts.values()) >= 5, report.text()  # it was under fire


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
    not committed: produced again) duplicate its output."""
    report = run([*SAMPLE, "--no-idempotence"], input="orders", output="payments",
                 instances=2, duration=12, records=400, interval=1.0, seed=7,
                 faults="lost_answers", broker_crashes=False, power_loss=False,
                 data_dir=str(tmp_path))
    assert not report.ok
    assert report.check.counts.get("duplicate", 0) > 0, report.text()


def test_the_command_needs_a_pipeline(capsys):
    assert main(["chaos", "--input", "a", "--output", "b"]) == 2
    assert "give the pipeline command after --" in capsys.readouterr().err
