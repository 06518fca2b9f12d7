"""The ``kafka_cluster`` fixture: a three-node Apache Kafka cluster (cluster.py) per test
module. Tests here are marked ``cluster`` and run with ``make test-cluster`` only
(docs/testing.md). When a test fails, the tail of every node's log is printed and the
logs' directory named."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.cluster.cluster import KafkaCluster
from tests.kafka_reference import jars_available, jars_dir


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        item.cluster_failed = True


def java_pids() -> set[int]:
    """Process ids of this user's running ``kafka.Kafka`` JVMs."""
    done = subprocess.run(["pgrep", "-u", str(os.getuid()), "-f", "kafka.Kafka"],
                          capture_output=True, text=True)
    return {int(p) for p in done.stdout.split()}


@pytest.fixture(scope="module")
def kafka_cluster(request, tmp_path_factory) -> Iterator[KafkaCluster]:
    if not jars_available():
        why = f"no Kafka jars in {jars_dir()} or no java: run `make kafka-jars`"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    cluster.start()
    print(f"\n3-node Kafka cluster started in {cluster.startup_seconds:.1f}s at "
          f"{cluster.bootstrap} (logs in {cluster.work_dir})")
    try:
        yield cluster
    finally:
        failed = any(getattr(item, "cluster_failed", False)
                     for item in request.session.items if item.module is request.module)
        if failed:  # the logs as the test left them, before the shutdown's lines
            print(f"\nlogs in {cluster.work_dir}\n{cluster.log_tails()}")
        cluster.stop()
        # Torn down cleanly: none of the cluster's JVMs (also restarted ones) survives.
        ours = {n.proc.pid for n in cluster.nodes.values() if n.proc is not None}
        assert not ours & java_pids(), f"JVMs left running: {ours & java_pids()}"
