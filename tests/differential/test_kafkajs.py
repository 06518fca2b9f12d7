"""KafkaJS 2.2.4 (tests/kafkajs, installed by `make kafkajs`) against txbroker and
Apache Kafka: admin createTopics, alterConfigs (AlterConfigs, key 33) and
describeConfigs with includeSynonyms, a transactional producer with sendOffsets
feeding on a read_committed group consumer, an aborted transaction hidden from a
read_committed reader, the group's committed offsets."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.integration.txn_util import unique
from tests.kafka_reference import ROOT

KAFKAJS = ROOT / "tests" / "kafkajs"

# DescribeConfigs' config sources (KafkaJS reports the numbers).
TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


def kafkajs_unavailable() -> str | None:
    if shutil.which("node") and (KAFKAJS / "node_modules" / "kafkajs" / "package.json").exists():
        return None
    why = "no node or no tests/kafkajs/node_modules: run `make kafkajs`"
    if os.environ.get("CI"):
        pytest.fail(why)  # CI ran make, which installs them
    return why


def run_kafkajs(bootstrap: str, prefix: str) -> dict[str, tuple[bool, object]]:
    done = subprocess.run(["node", str(KAFKAJS / "kafkajs_check.js"), bootstrap, prefix],
                          capture_output=True, text=True, timeout=180)
    assert "DONE" in done.stdout, f"kafkajs_check.js did not finish:\n{done.stdout}\n{done.stderr}"
    steps: dict[str, tuple[bool, object]] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"STEP (\S+) (OK|FAIL) (.*)", line)
        if m:
            ok = m.group(2) == "OK"
            steps[m.group(1)] = (ok, json.loads(m.group(3)) if ok else m.group(3))
    return steps


@pytest.mark.kafka_ci
def test_kafkajs(broker):
    why = kafkajs_unavailable()
    if why:
        pytest.skip(why)
    steps = run_kafkajs(broker.bootstrap, unique("kafkajs"))
    failed = {name: detail for name, (ok, detail) in steps.items() if not ok}
    assert not failed, failed
    assert steps["create_topics"] == (True, True)
    assert steps["alter_configs"][1] == [[0, steps["alter_configs"][1][0][1]]]
    configs = steps["describe_configs_synonyms"][1]
    assert configs["retention.ms"] == {
        "value": "86400000", "source": TOPIC_CONFIG, "isDefault": False,
        # No DEFAULT_CONFIG synonym: Kafka's log.retention.ms defaults to null (the
        # value comes from log.retention.hours), and synonyms start at that key.
        "synonyms": [["retention.ms", "86400000", TOPIC_CONFIG]]}, configs
    assert configs["cleanup.policy"] == {
        "value": "delete", "source": DEFAULT_CONFIG, "isDefault": True,
        "synonyms": [["log.cleanup.policy", "delete", DEFAULT_CONFIG]]}, configs
    assert steps["produce_input"][1] == [[0, 0, "0"]]
    assert steps["consume_transform_produce"][1] == 10
    assert steps["read_committed_output"][1] == [f"out:v{i}" for i in range(10)]
    assert steps["fetch_offsets"][1] == [[True, [[0, "10"]]]]
