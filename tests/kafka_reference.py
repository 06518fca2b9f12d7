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


MIRROR_POM = ROOT / "tests" / "kafka" / "mirror" / "pom.xml"


def mirror_jars_dir() -> Path:
    """MirrorMaker 2's classpath (``make mirror-jars``), pinned apart from the broker's:
    connect-mirror is not served at every Kafka version (tests/kafka/mirror/pom.xml)."""
    m = re.search(r"<mirror\.version>([^<]+)</mirror\.version>", MIRROR_POM.read_text())
    assert m, f"no <mirror.version> in {MIRROR_POM}"
    return ROOT / ".jvm" / f"mirror-{m.group(1)}"


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


def file_tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a JVM's log file."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "".join(text.splitlines(keepends=True)[-lines:])


def new_cluster_id() -> str:
    """A random cluster id, as ``kafka-storage random-uuid`` prints it: never starting
    with "-" (Kafka's Uuid.randomUuid draws again too), which kafka-storage's argument
    parser would take for an option (1 start in 64 failed so)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaProcess:
    """``kafka.Kafka`` (broker and controller in one JVM) in a child process."""

    def __init__(self, work_dir: str | os.PathLike, overrides: Mapping[str, str] | None = None,
                 heap: str = "512m", extra_listeners: Mapping[str, str] | None = None,
                 scram: Sequence[str] = (), java_options: Sequence[str] = (),
                 nice: int = 0) -> None:
        """``extra_listeners``: listener name -> security protocol (e.g. {"SASL_SSL":
        "SASL_SSL"}), each on a free port (``ports[name]``), next to PLAINTEXT; their
        SASL/TLS keys go in ``overrides``. ``scram``: SCRAM credentials written at format
        time, as ``kafka-storage.sh format --add-scram`` takes them
        ('SCRAM-SHA-256=[name=alice,password=alice-secret]'). ``java_options``: more JVM
        flags; ``nice``: run the JVM at that niceness (``nice -n``, which execs java: the
        process id stays the JVM's)."""
        self.work_dir = Path(work_dir)
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.extra_listeners = dict(extra_listeners or {})
        self.scram = list(scram)
        self.java_options = list(java_options)
        self.nice = nice
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
        prefix = ["nice", "-n", str(self.nice)] if self.nice else []
        return [*prefix, "java", f"-Xmx{self.heap}", "-Xss1m", "-XX:+UseG1GC",
                *self.java_options,
                f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
                "-cp", str(jars_dir() / "*"), main, *args]

    def allocate_ports(self, taken: set[int] | None = None) -> None:
        """Choose free ports for the listeners (none of ``taken``, which grows), once: a
        restarted node keeps its ports, and a quorum's nodes know each other's up front."""
        if self.port:
            return
        taken = set() if taken is None else taken

        def pick() -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        self.port, self.controller_port = pick(), pick()
        self.ports = {"PLAINTEXT": self.port}
        for name in self.extra_listeners:
            self.ports[name] = pick()

    def _write_config(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.allocate_ports()
        listeners = "".join(f"{name}://{self.host}:{port}," for name, port in self.ports.items())
        config = dict(BASE_CONFIG)
        config["listener.security.protocol.map"] += "".join(
            f",{name}:{protocol}" for name, protocol in self.extra_listeners.items())
        config.update({
            "listeners": f"{listeners}CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"{listeners}CONTROLLER://{self.host}:{self.controller_port}",
            "log.dirs": str(self.work_dir / "data"),
        })
        if "controller.quorum.voters" not in self.overrides:
            # A dynamic quorum (KIP-853) of this one controller: Kafka 4's way, formatted
            # with --standalone (a multi-node quorum passes the static voters instead).
            config["controller.quorum.bootstrap.servers"] = f"{self.host}:{self.controller_port}"
        config.update(self.overrides)
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        (self.work_dir / "log4j2.properties").write_text(LOG4J2)
        return path

    def start(self, timeout: float = 90) -> KafkaProcess:
        if not jars_available():
            raise RuntimeError(f"no Kafka jars in {jars_dir()} (or no java): run make kafka-jars")
        began = time.monotonic()
        self.format(new_cluster_id(), standalone=True)
        self.launch(began + timeout)
        self.startup_seconds = time.monotonic() - began
        return self

    def format(self, cluster_id: str, standalone: bool) -> None:
        """Write server.properties and format the storage (``kafka-storage format``).
        ``standalone``: a dynamic quorum of this one controller; otherwise the static
        ``controller.quorum.voters`` of the overrides."""
        self.wait_formatted(self.format_async(cluster_id, standalone))

    def format_async(self, cluster_id: str, standalone: bool) -> subprocess.Popen:
        """``format`` without waiting (a cluster formats its nodes side by side)."""
        properties = self._write_config()
        return subprocess.Popen(
            self._java("kafka.tools.StorageTool", "format", "--cluster-id", cluster_id,
                       "--config", str(properties), *(["--standalone"] if standalone else []),
                       *(arg for entry in self.scram for arg in ("--add-scram", entry))),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    @staticmethod
    def wait_formatted(proc: subprocess.Popen) -> None:
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({proc.returncode}):\n{out}")

    def launch(self, deadline: float | None = None) -> None:
        """Run the formatted node (again, after a kill: same ports, same data) and, with
        a ``deadline``, wait until it answers ApiVersions."""
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in kill/terminate)
        self.proc = subprocess.Popen(self._java("kafka.Kafka", str(self.work_dir /
                                                                   "server.properties")),
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        if deadline is not None:
            self.wait_ready(deadline)

    def wait_ready(self, deadline: float) -> None:
        try:
            self._wait_ready(deadline)
        except BaseException:
            self.kill()
            raise

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
        return file_tail(self.log_path, lines)

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
