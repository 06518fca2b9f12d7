"""The recipes of docs/testing-your-pipeline.md, one per client, each run through
``txbroker.chaos.run`` under instance kills, broker crashes, power losses and request
faults: 0 anomalies (marked ``chaos``: `make test-chaos`, not `make test`; ~35 s each).
The Java recipe needs `make kafka-jars` and javac, the KafkaJS one `make kafkajs`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_reference import ROOT, jars_available, jars_dir
from txbroker.chaos import run

# Kill cycles: a restart follows a power loss; a zombie (an instance paused, replaced,
# resumed) and a clean restart where the run has those events.
KILLS = ("instance kill", "broker crash", "broker restart", "zombie", "clean restart")
MIN_KILLS = 6


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(why)  # CI ran make, which installs them
    pytest.skip(why)


def _run_recipe(command: list[str], tmp_path: Path, seed: int) -> None:
    report = run(command, input="orders", output="payments", instances=2, duration=30,
                 records=600, interval=1.5, seed=seed, data_dir=str(tmp_path))
    assert report.ok, report.text()
    assert report.check.stats["reads"] == report.records, report.text()
    kills = sum(report.counts.get(kind, 0) for kind in KILLS)
    assert kills >= MIN_KILLS, report.text()  # it was under fire


@pytest.mark.chaos
def test_the_kafka_python_recipe_is_exactly_once_under_fire(tmp_path):
    _run_recipe([sys.executable, "-m", "txbroker.testing.chaos.recipes.kafka_python_pipeline"],
                tmp_path, seed=11)


@pytest.mark.chaos
def test_the_aiokafka_recipe_is_exactly_once_under_fire(tmp_path):
    _run_recipe([sys.executable, "-m", "txbroker.testing.chaos.recipes.aiokafka_pipeline"],
                tmp_path, seed=11)


def java_command(tmp_path_factory, main_class: str) -> list[str]:
    """tests/jvm/chaos/ compiled; the command that runs ``main_class`` from it."""
    if not (jars_available() and shutil.which("javac")):
        _unavailable(f"no Kafka jars in {jars_dir()} or no javac: run `make kafka-jars`")
    classes = tmp_path_factory.mktemp("chaos-recipes")
    done = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", f"{jars_dir()}/*",
                           *map(str, (ROOT / "tests" / "jvm" / "chaos").glob("*.java"))],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"javac failed:\n{done.stdout}\n{done.stderr}"
    return ["java", "-Xmx192m", "-XX:TieredStopAtLevel=1", "-cp",
            f"{classes}{os.pathsep}{jars_dir()}/*", main_class]


@pytest.fixture(scope="module")
def java_recipe(tmp_path_factory) -> list[str]:
    return java_command(tmp_path_factory, "ChaosPipeline")


@pytest.mark.chaos
def test_the_java_recipe_is_exactly_once_under_fire(tmp_path, java_recipe):
    _run_recipe(java_recipe, tmp_path, seed=11)


@pytest.mark.chaos
def test_the_kafkajs_recipe_is_exactly_once_under_fire(tmp_path):
    kafkajs = ROOT / "tests" / "kafkajs"
    if not (shutil.which("node") and (kafkajs / "node_modules" / "kafkajs").is_dir()):
        _unavailable("no node or no tests/kafkajs/node_modules: run `make kafkajs`")
    _run_recipe(["node", str(kafkajs / "chaos_pipeline.js")], tmp_path, seed=11)
