"""``txbroker chaos --generator`` with ``--mapping python:...``: the user's own generator
(testing/chaos/recipes/orders.py: orders keyed by customer, in transactions, some
aborted) feeds the input, the run learns the input by reading it back, and the
mapping names each output's input (marked ``chaos``: `make test-chaos`; ~45 s)."""

from __future__ import annotations

import sys

import pytest

from txbroker.chaos import run

SAMPLE = [sys.executable, "-m", "txbroker.testing.chaos.sample_pipeline"]
GENERATOR = [sys.executable, "-m", "txbroker.testing.chaos.recipes.orders"]
MAPPING = "python:txbroker.testing.chaos.recipes.orders:order_id"


@pytest.mark.chaos
def test_the_sample_pipeline_fed_by_a_generator_checks_clean(tmp_path):
    report = run(SAMPLE, input="orders", output="payments", instances=2, duration=20,
                 records=300, interval=1.5, seed=5, generator=GENERATOR, mapping=MAPPING,
                 data_dir=str(tmp_path))
    assert report.ok, report.text()
    assert report.records >= 300, report.text()  # more if a restarted generator wrote again
    assert report.check.stats["reads"] == report.records, report.text()
    assert sum(report.counts.values()) >= 5, report.text()  # it was under fire


@pytest.mark.chaos
def test_output_of_the_generators_aborted_transactions_is_caught(tmp_path):
    """Which inputs were aborted comes from the input topic's markers, read back."""
    report = run([*SAMPLE, "--read-uncommitted"], input="orders", output="payments",
                 instances=1, duration=6, records=100, seed=3, generator=GENERATOR,
                 mapping=MAPPING, faults="none", broker_crashes=False, power_loss=False,
                 data_dir=str(tmp_path))
    assert not report.ok
    assert set(report.check.counts) == {"G1a"}, report.text()
    assert report.check.counts["G1a"] >= 10, report.text()  # 2 aborted transactions of 10
    assert all("void" in example["id"] for example in report.check.anomalies["G1a"])
