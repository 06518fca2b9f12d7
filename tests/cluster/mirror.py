"""MirrorMaker 2 as its own JVM (Kafka's dedicated driver,
``org.apache.kafka.connect.mirror.MirrorMaker``, from the jars ``make mirror-jars`` pins),
copying txbroker (cluster alias ``txbroker``) to a Kafka cluster (alias ``kafka``)::

    with MirrorMaker2(work_dir, broker.bootstrap, cluster.bootstrap, topics="payments.*"):
        ...  # wait on the target for what should arrive

``properties`` is the file docs/migrating-to-kafka.md shows; ``read_committed=False``
leaves the source consumer at Kafka's default (read_uncommitted), to show what that
copies. The log (INFO) is ``<work_dir>/mirror-maker.log``.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.kafka_reference import LOG4J2, file_tail, mirror_jars_dir

MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"


def mirror_properties(source: str, target: str, topics: str, groups: str = ".*",
                      read_committed: bool = True, source_alias: str = "txbroker") -> dict:
    """The MM2 configuration of the migration (one-way, source -> target)."""
    flow = f"{source_alias}->kafka"
    props = {
        "clusters": f"{source_alias}, kafka",
        f"{source_alias}.bootstrap.servers": source,
        "kafka.bootstrap.servers": target,
        f"{flow}.enabled": "true",
        f"kafka->{source_alias}.enabled": "false",
        f"{flow}.topics": topics,
        f"{flow}.groups": groups,
        # Topic names kept as they are (the default policy would name them
        # "<alias>.payments" on the target, and applications would need new names).
        "replication.policy.class":
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        # Nothing written to the source: the offset syncs live on the target, and no
        # heartbeats (their reverse flow would write into txbroker).
        "offset-syncs.topic.location": "target",
        "emit.heartbeats.enabled": "false",
        "sync.topic.configs.enabled": "true",
        # ACLs are recreated by `txbroker acls export` (the target may have no authorizer).
        "sync.topic.acls.enabled": "false",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        "refresh.topics.interval.seconds": "2",
        "refresh.groups.interval.seconds": "2",
        # An offset sync for every record that moves the source/target offset gap
        # (transaction markers and aborted records do): the most exact translation.
        "offset.lag.max": "0",
        # -1: the target brokers' default.replication.factor for topics MM2 creates.
        "replication.factor": "-1",
        "checkpoints.topic.replication.factor": "-1",
        "offset-syncs.topic.replication.factor": "-1",
        "config.storage.replication.factor": "-1",
        "offset.storage.replication.factor": "-1",
        "status.storage.replication.factor": "-1",
        "tasks.max": "1",
        # The Connect worker's offset commit, which also writes MM2's last pending offset
        # sync of each partition (the one that makes a drained group's translation exact):
        # every second rather than every minute.
        "kafka.offset.flush.interval.ms": "1000",
    }
    if read_committed:
        # <alias>.consumer.* reaches MirrorSourceConnector's consumer on that cluster
        # (as source.consumer.isolation.level): records of aborted transactions stay out.
        props[f"{source_alias}.consumer.isolation.level"] = "read_committed"
    return props


class MirrorMaker2:
    """One MM2 process; ``stop`` (SIGTERM, then SIGKILL) leaves no JVM behind."""

    def __init__(self, work_dir: str | Path, source: str, target: str, topics: str,
                 groups: str = ".*", read_committed: bool = True,
                 source_alias: str = "txbroker", heap: str = "384m", nice: int = 10) -> None:
        self.work_dir = Path(work_dir)
        self.properties = mirror_properties(source, target, topics, groups, read_committed,
                                            source_alias)
        self.heap = heap
        self.nice = nice
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def log_path(self) -> Path:
        return self.work_dir / "mirror-maker.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> MirrorMaker2:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "mm2.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        (self.work_dir / "log4j2.properties").write_text(LOG4J2)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            ["nice", "-n", str(self.nice), "java", f"-Xmx{self.heap}", "-XX:+UseG1GC",
             "-XX:TieredStopAtLevel=1",
             f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
             "-cp", str(mirror_jars_dir() / "*"), MAIN, str(config)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"MirrorMaker 2 exited with {self.proc.returncode}:\n"
                               + self.log_tail())

    def log_tail(self, lines: int = 60) -> str:
        return file_tail(self.log_path, lines)

    def stop(self, timeout: float = 30) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> MirrorMaker2:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
