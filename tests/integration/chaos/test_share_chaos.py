"""``txbroker chaos --share``: a share-group worker pool (confluent-kafka ShareConsumer,
the Java KafkaShareConsumer 4.4 recipe and the franz-go one) under instance kills,
broker crashes and power losses checks clean; a worker that REJECTs records is caught
losing them (marked ``chaos``: `make test-chaos`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.differential.test_share_clients import go_build
from tests.integration.chaos.test_recipes import java_command
from txbroker.chaos import run_share
from txbroker.cli import main

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

WORKER = [sys.executable, "-m", "txbroker.testing.chaos.recipes.confluent_share_worker"]
# Only the strikes the share guarantees are about: kills, crashes and power losses.
KILLS_CRASHES_POWER = {"faults": "none", "clean_restarts": False, "hangs": False,
                       "zombies": False}


@pytest.mark.chaos
def test_a_share_worker_pool_survives_kills_crashes_and_power_losses(tmp_path):
    report = run_share(WORKER, input="jobs", instances=3, duration=16, records=300,
                       interval=1.0, seed=11, data_dir=str(tmp_path), **KILLS_CRASHES_POWER)
    assert report.ok, report.text()
    struck = {"instance kill", "broker crash", "power loss"}
    assert struck <= set(report.counts), report.text()  # it was under fire
    stats = report.check.stats
    assert stats["inputs"] == report.records >= 250
    assert stats["accepts confirmed"] + stats["accepts unknown"] >= report.records


@pytest.mark.chaos
def test_the_java_share_worker_survives_kills_crashes_and_power_losses(tmp_path,
                                                                      tmp_path_factory):
    command = java_command(tmp_path_factory, "ChaosShareWorker")
    report = run_share(command, input="jobs", instances=2, duration=20, records=300,
                       interval=1.5, seed=11, data_dir=str(tmp_path), **KILLS_CRASHES_POWER)
    assert report.ok, report.text()
    assert {"instance kill", "broker crash"} <= set(report.counts), report.text()
    assert report.check.stats["deliveries"] >= report.records >= 250


@pytest.fixture(scope="session")
def franz_go_share_worker(tmp_path_factory) -> Path:
    return go_build(tmp_path_factory, "chaosshare")


@pytest.mark.chaos
def test_the_franz_go_share_worker_survives_kills_crashes_and_power_losses(
        tmp_path, franz_go_share_worker):
    report = run_share([str(franz_go_share_worker)], input="jobs", instances=2, duration=20,
                       records=300, interval=1.5, seed=11, data_dir=str(tmp_path),
                       **KILLS_CRASHES_POWER)
    assert report.ok, report.text()
    # Under fire: which way the broker went down depends on when a power loss fires.
    assert "instance kill" in report.counts, report.text()
    assert {"broker crash", "power loss"} & set(report.counts), report.text()
    stats = report.check.stats
    assert stats["deliveries"] >= report.records >= 250
    assert stats["accepts confirmed"] + stats["accepts unknown"] >= report.records


@pytest.mark.chaos
def test_a_worker_that_rejects_records_is_caught_losing_them(tmp_path):
    report = run_share([*WORKER, "--reject-every", "25"], input="jobs", instances=2,
                       duration=6, records=100, seed=1, stall_timeout=20,
                       data_dir=str(tmp_path), instance_kills=False, broker_crashes=False,
                       power_loss=False, **KILLS_CRASHES_POWER)
    assert not report.ok
    assert report.check.counts.get("lost", 0) >= 2, report.text()
    assert set(report.check.counts) == {"lost"}, report.text()


def test_the_command_needs_an_output_or_share(capsys):
    assert main(["chaos", "--input", "a", "--", "true"]) == 2
    assert "--output is required (or --share)" in capsys.readouterr().err
