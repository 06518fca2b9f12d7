"""A three-node Apache Kafka cluster from the pinned jars, for the cluster tests (issue 30).

Each node is one ``kafka.Kafka`` JVM with both roles (broker and KRaft controller, the
fastest to start on two cores: three JVMs rather than six), started with
``tests/kafka_reference.KafkaProcess`` (the single-node starter of the differential
tests) on ephemeral ports. The controller quorum is static (``controller.quorum.voters``
lists the three), so every node is formatted alike and any two of them keep the cluster
going. Replication as a production cluster has it: default replication factor 3,
``min.insync.replicas=2``, the offsets and transaction-state topics replicated three
times (``transaction.state.log.min.isr=2``)::

    with KafkaCluster(tmp_path) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        victim = cluster.leader("orders", 0)
        cluster.kill(victim)          # SIGKILL
        cluster.restart(victim)       # same ports, same data

Logs (INFO) stay in ``<work_dir>/node-<id>/kafka.log``; ``log_tails()`` shows them.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from txbroker.protocol.messages import build, request_module

from tests.helpers import RawClient
from tests.kafka_reference import KafkaProcess, new_cluster_id

METADATA = 3
FIND_COORDINATOR = 10
GROUP, TRANSACTION = 0, 1  # FindCoordinator key types

# What makes it a replicated cluster, and what makes fail-over quick enough for tests: a
# SIGKILLed broker is fenced (its partitions get new leaders, it leaves the ISRs) once
# it missed heartbeats for broker.session.timeout.ms (Kafka's default: 9 s).
CLUSTER_CONFIG = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # Fewer internal partitions than Kafka's 50: created in a second rather than many.
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

# Per JVM: a capped heap, C1 only (start-up and short runs: C2's compile threads would
# compete with three brokers and Spark for two cores).
HEAP = "384m"
JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)


class KafkaCluster:
    """Three combined broker+controller nodes (ids 1..size) as separate processes."""

    def __init__(self, work_dir: str | Path, size: int = 3,
                 overrides: Mapping[str, str] | None = None, heap: str = HEAP,
                 nice: int = 10) -> None:
        self.work_dir = Path(work_dir)
        self.size = size
        self.nodes: dict[int, KafkaProcess] = {}
        taken: set[int] = set()
        for node_id in range(1, size + 1):
            node = KafkaProcess(self.work_dir / f"node-{node_id}", heap=heap,
                                java_options=JAVA_OPTIONS, nice=nice)
            node.allocate_ports(taken)
            self.nodes[node_id] = node
        voters = ",".join(f"{i}@{n.host}:{n.controller_port}" for i, n in self.nodes.items())
        for node_id, node in self.nodes.items():
            node.overrides = {**CLUSTER_CONFIG, "node.id": str(node_id),
                              "controller.quorum.voters": voters, **(overrides or {})}
        self.startup_seconds = 0.0

    # --- life cycle ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def start(self, timeout: float = 90) -> KafkaCluster:
        began = time.monotonic()
        cluster_id = new_cluster_id()
        formatters = [n.format_async(cluster_id, standalone=False) for n in self.nodes.values()]
        try:
            for proc in formatters:
                KafkaProcess.wait_formatted(proc)
            for node in self.nodes.values():
                node.launch()
            deadline = began + timeout
            for node in self.nodes.values():
                node.wait_ready(deadline)
            self.wait_brokers(set(self.nodes), deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def kill(self, node_id: int) -> None:
        """SIGKILL the node's JVM: no controlled shutdown, no flush."""
        node = self.nodes[node_id]
        assert node.running, f"node {node_id} is not running"
        node.kill()

    def restart(self, node_id: int, timeout: float = 60) -> None:
        """Start a killed node again on its ports and data; returns once the controller
        has it registered and unfenced (it is in Metadata's broker list)."""
        node = self.nodes[node_id]
        assert not node.running, f"node {node_id} is still running"
        deadline = time.monotonic() + timeout
        node.launch(deadline)
        self.wait_brokers({i for i, n in self.nodes.items() if n.running},
                          deadline - time.monotonic())

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every running node at once (controlled shutdown), SIGKILL whatever is
        left after ``timeout``: no JVM outlives the cluster."""
        running = [n for n in self.nodes.values() if n.running]
        for node in running:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in running:
            assert node.proc is not None
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            node.kill()  # SIGKILL if still running; closes its log either way

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(f"--- node {i} ({n.log_path}) ---\n{n.log_tail(lines)}"
                         for i, n in self.nodes.items())

    # --- what the cluster says ----------------------------------------------------------------

    def _ask(self, api_key: int, version: int, message):
        """One request to the first running node that answers."""
        errors = []
        for node_id, node in self.nodes.items():
            if not node.running:
                continue
            try:
                client = RawClient(node.host, node.port, timeout=10)
            except OSError as e:
                errors.append(f"node {node_id}: {e}")
                continue
            try:
                response = client.request(api_key, version, message)
            except OSError as e:
                errors.append(f"node {node_id}: {e}")
                continue
            finally:
                client.close()
            if response is not None:
                return response
        raise ConnectionError(f"no node answered: {errors}")

    def _metadata(self, topics: list[str] | None):
        m = request_module(METADATA, 12)
        items = None if topics is None else tuple(
            build(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        return self._ask(METADATA, 12, build(
            m.MetadataRequest, topics=items, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False))

    def brokers(self) -> set[int]:
        """The node ids Metadata lists (the controller drops fenced brokers from it)."""
        return {b.node_id for b in self._metadata([]).brokers}

    def wait_brokers(self, expected: set[int], timeout: float = 60) -> None:
        self.wait(lambda: self.brokers() == expected, timeout,
                   lambda: f"brokers {self.brokers()} instead of {expected}")

    def partition(self, topic: str, partition: int):
        """Metadata's view of one partition (leader_id, replica_nodes, isr_nodes ...)."""
        for t in self._metadata([topic]).topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    return p
        raise KeyError(f"{topic}-{partition} not in metadata")

    def leader(self, topic: str, partition: int) -> int:
        return self.partition(topic, partition).leader_id

    def coordinator(self, key: str, key_type: int = TRANSACTION, timeout: float = 30) -> int:
        """The node that FindCoordinator names for a transactional.id (or, with
        ``key_type=GROUP``, a group), once the internal topic has a leader for it."""
        m = request_module(FIND_COORDINATOR, 4)
        request = build(m.FindCoordinatorRequest, key_type=key_type, coordinator_keys=(key,))
        found: list[int] = []

        def answered() -> bool:
            [c] = self._ask(FIND_COORDINATOR, 4, request).coordinators
            if c.error_code == 0:
                found.append(c.node_id)
            return bool(found)

        self.wait(answered, timeout, lambda: f"no coordinator for {key!r}")
        return found[0]

    def wait_in_sync(self, topics: list[str], timeout: float = 60) -> None:
        """Until every partition of ``topics`` has a leader and every running node in its
        ISR (a restarted broker has caught up)."""
        running = {i for i, n in self.nodes.items() if n.running}

        def synced() -> bool:
            for t in self._metadata(topics).topics:
                if t.error_code != 0 or not t.partitions:
                    return False
                for p in t.partitions:
                    if p.leader_id < 0 or not running <= set(p.isr_nodes):
                        return False
            return True

        self.wait(synced, timeout, lambda: f"{topics} not in sync on nodes {running}")

    def wait(self, condition, timeout: float, why) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except (OSError, ConnectionError):
                pass  # a node going away mid-question: ask again
            if time.monotonic() > deadline:
                raise TimeoutError(f"{why()}\n{self.log_tails(20)}")
            time.sleep(0.2)
