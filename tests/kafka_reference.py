"""Apache Kafka as a process: a single-node KRaft broker from the jars that
``make kafka-jars`` fetched into ``.jvm/kafka-<version>/``, on ephemeral ports.

The reference broker of the differential tests (tests/differential/). Like
``BrokerProcess``, ``start`` returns once the broker answers ApiVersions::

    with KafkaProcess(tmp_dir) as kafka:
        producer = Producer({"bootstrap.servers": kafka.bootstrap})

It writes server.properties into its directory, formats the storage as a standalone
controller quorum of one (``kafka-storage format --standalone``), then runs
``kafka.Kafka`` with a modest heap. The broker's log (INFO) is kept in ``kafka.log``
there and its tail is shown when start-up fails.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "tests" / "kafka" / "pom.xml"


def kafka_version() -> str:
    """The pinned version, from tests/kafka/pom.xml (the one place it is written)."""
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    assert m, f"no <kafka.version> in {POM}"
    return m.group(1)


def jars_dir() -> Path:
    return ROOT / ".jvm" / f"kafka-{kafka_version()}"


def jars_available() -> bool:
    """True once ``make kafka-jars`` completed (it writes the stamp last)."""
    return (jars_dir() / ".complete").exists() and shutil.which("java") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Settings a single broker needs (internal topics of replication factor 1) and the ones
# that make tests quick (no initial rebalance delay); everything else is Kafka's default,
# since Kafka's defaults are what the differential tests compare against.
BASE_CONFIG = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

LOG4J2 = """\
rootLogger.level=INFO
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.state.name=state.change.logger
logger.state.level=WARN
"""


class KafkaProcess:
    """``kafka.Kafka`` (broker and controller in one JVM) in a child process."""

    def __init__(self, work_dir: str | os.PathLike, overrides: Mapping[str, str] | None = None,
                 heap: str = "512m", extra_listeners: Mapping[str, str] | None = None,
                 scram: Sequence[str] = ()) -> None:
        """``extra_listeners``: listener name -> security protocol (e.g. {"SASL_SSL":
        "SASL_SSL"}), each on a free port (``ports[name]``), next to PLAINTEXT; their
        SASL/TLS keys go in ``overrides``. ``scram``: SCRAM credentials written at format
        time, as ``kafka-storage.sh format --add-scram`` takes them
        ('SCRAM-SHA-256=[name=alice,password=alice-secret]')."""
        self.work_dir = Path(work_dir)
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.extra_listeners = dict(extra_listeners or {})
        self.scram = list(scram)
        self.ports: dict[str, int] = {}
        self.host = "127.0.0.1"
        self.port = 0
        self.controller_port = 0
        self.proc: subprocess.Popen | None = None
        self.startup_seconds = 0.0
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "kafka.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", f"-Xmx{self.heap}", "-Xss1m", "-XX:+UseG1GC",
                f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
                "-cp", str(jars_dir() / "*"), main, *args]

    def _write_config(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = free_port(), free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        taken = {self.port, self.controller_port}
        self.ports = {"PLAINTEXT": self.port}
        for name in self.extra_listeners:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            self.ports[name] = port
        listeners = "".join(f"{name}://{self.host}:{port}," for name, port in self.ports.items())
        config = dict(BASE_CONFIG)
        config["listener.security.protocol.map"] += "".join(
            f",{name}:{protocol}" for name, protocol in self.extra_listeners.items())
        config.update({
            "listeners": f"{listeners}CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"{listeners}CONTROLLER://{self.host}:{self.controller_port}",
            # A dynamic quorum (KIP-853) of this one controller: Kafka 4's way, formatted
            # with --standalone below (controller.quorum.voters would be the static way).
            "controller.quorum.bootstrap.servers": f"{self.host}:{self.controller_port}",
            "log.dirs": str(self.work_dir / "data"),
        })
        config.update(self.overrides)
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (self.work_dir / "log4j2.properties").write_text(LOG4J2)
        return path

    def start(self, timeout: float = 90) -> KafkaProcess:
        if not jars_available():
            raise RuntimeError(f"no Kafka jars in {jars_dir()} (or no java): run make kafka-jars")
        began = time.monotonic()
        properties = self._write_config()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "--cluster-id", cluster_id,
                       "--config", str(properties), "--standalone",
                       *(arg for entry in self.scram for arg in ("--add-scram", entry))),
            capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({fmt.returncode}):\n"
                               f"{fmt.stdout}\n{fmt.stderr}")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in kill/terminate)
        self.proc = subprocess.Popen(self._java("kafka.Kafka", str(properties)),
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(began + timeout)
        except BaseException:
            self.kill()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, deadline: float) -> None:
        from tests.helpers import RawClient
        from tests.integration.wire_util import API_VERSIONS, api_versions_request

        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode} while starting:\n"
                                   + self.log_tail())
            try:
                client = RawClient(self.host, self.port, timeout=2)
            except OSError:
                time.sleep(0.2)
                continue
            try:
                response = client.request(API_VERSIONS, 3, api_versions_request())
                if response is not None and response.error_code == 0:
                    return
            except OSError:
                pass
            finally:
                client.close()
            time.sleep(0.2)
        raise RuntimeError("Kafka did not answer ApiVersions in time:\n" + self.log_tail())

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "".join(text.splitlines(keepends=True)[-lines:])

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (Kafka's controlled shutdown); SIGKILL if it takes longer than ``timeout``."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        self._close_log()
        return rc

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> KafkaProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.running:
            self.terminate()
