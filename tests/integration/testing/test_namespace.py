"""The installed package owns one namespace, ``txbroker.*``: an application with its
own ``storage``, ``protocol``, ``broker``, ``coordinator``, ``tools``, ``testing`` and
``spark_jobs`` packages uses the ``txbroker`` pytest fixture and the CLI beside them,
from its own directory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

# The application's own packages, named like ours; each says whose it is.
APP_PACKAGES = ("storage", "protocol", "broker", "coordinator", "tools", "testing", "spark_jobs")

APP_TEST = '''
from confluent_kafka import Consumer, Producer

import broker
import storage
import protocol
import coordinator
import spark_jobs
import testing
import tools
from storage.log_config import WHOSE


def test_app_packages_and_the_fixture(txbroker):
    assert WHOSE == "the application's"
    for module in (broker, storage, protocol, coordinator, tools, testing, spark_jobs):
        assert module.WHOSE == "the application's", module
    txbroker.create_topic("app", partitions=1)
    p = Producer({"bootstrap.servers": txbroker.bootstrap})
    p.produce("app", b"v")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "g",
                  "auto.offset.reset": "earliest"})
    c.assign([__import__("confluent_kafka").TopicPartition("app", 0, 0)])
    msg = c.poll(10)
    c.close()
    assert msg is not None and msg.value() == b"v"
'''


def _make_app(root: Path) -> None:
    for name in APP_PACKAGES:
        (root / name).mkdir()
        (root / name / "__init__.py").write_text('WHOSE = "the application\'s"\n')
    # The very module name whose clash broke the fixture before (broker/config.py
    # imported storage.log_config).
    (root / "storage" / "log_config.py").write_text('WHOSE = "the application\'s"\n')
    (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (root / "test_app.py").write_text(textwrap.dedent(APP_TEST))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_application_with_same_named_packages_uses_the_fixture(tmp_path):
    _make_app(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout


def test_cli_and_module_entry_point_from_an_application_directory(tmp_path):
    _make_app(tmp_path)
    for argv in ([str(Path(sys.executable).with_name("txbroker")), "--version"],
                 [sys.executable, "-m", "txbroker", "--version"]):
        run = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith("txbroker "), run.stdout
