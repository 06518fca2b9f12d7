"""The differential fixture: every test here runs against txbroker and against Apache
Kafka (tests/kafka_reference.py) with the same code, and asserts what Kafka does.

``broker`` is parametrized over ``txbroker`` and ``kafka``. Both brokers are
session-scoped (pytest orders the tests so that each starts once), so tests use
topic and transactional-id names of their own (``broker.topic(...)``, ``unique``).
The Kafka leg carries the ``kafka`` marker: ``make test`` runs only the tests also
marked ``kafka_ci`` on Kafka, ``make test-kafka`` runs all of them (docs/testing.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping

import pytest
from txbroker.protocol.messages import build, request_module

from tests.helpers import RawClient
from tests.integration.clients import unique_topic
from tests.kafka_reference import KafkaProcess, jars_available, jars_dir, kafka_version

LIST_OFFSETS = 2
FIND_COORDINATOR = 10

# The same settings on both brokers, where Kafka's default would only slow the tests:
# few partitions for the internal topics, timed-out transactions found within a second.
COMMON_CONFIG = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    # Streams groups (KIP-1071) assign a new group's tasks at once (Kafka's 3 s delay
    # has its own test, with a group config).
    "group.streams.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    # Consumer-protocol (KIP-848) members heartbeat every 0.5 s instead of 5 s.
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    # A SIGKILLed member's partitions move after 6 s instead of 45 s.
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


class Broker:
    """One of the two brokers, seen only over the wire (plus its name)."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name = name
        self.host = host
        self.port = port
        self._admin = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_kafka(self) -> bool:
        return self.name == "kafka"

    def __repr__(self) -> str:
        return f"<{self.name} at {self.bootstrap}>"

    @property
    def admin(self):
        """A confluent-kafka AdminClient (created on first use, shared by the session)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def close(self) -> None:
        # Dropping the last reference destroys librdkafka's handle: no reconnect noise
        # from a stopped broker.
        self._admin = None

    def raw(self, timeout: float = 10) -> RawClient:
        return RawClient(self.host, self.port, timeout=timeout)

    def create_topic(self, name: str, partitions: int = 1,
                     configs: Mapping[str, str] | None = None, timeout: float = 30) -> str:
        """CreateTopics, then wait until Metadata shows a leader for every partition
        (Kafka answers CreateTopics before its partitions have leaders)."""
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics(
            [NewTopic(name, partitions, 1, config=dict(configs or {}))], operation_timeout=timeout)
        futures[name].result(timeout)
        deadline = time.monotonic() + timeout
        while True:
            md = self.admin.list_topics(name, timeout=5).topics.get(name)
            if (md is not None and md.error is None and len(md.partitions) == partitions
                    and all(p.leader >= 0 and p.error is None for p in md.partitions.values())
                    and self._leading(name, partitions)):
                return name
            if time.monotonic() > deadline:
                raise AssertionError(f"{self}: topic {name} has no leaders: {md}")
            time.sleep(0.1)

    def _leading(self, topic: str, partitions: int) -> bool:
        """Whether ListOffsets succeeds on every partition: Kafka's metadata shows a
        leader a moment before that broker serves the partition (raw-wire tests would
        get NOT_LEADER_OR_FOLLOWER, which clients retry)."""
        m = request_module(LIST_OFFSETS, 7)
        client = self.raw()
        try:
            r = client.request(LIST_OFFSETS, 7, build(
                m.ListOffsetsRequest, replica_id=-1, isolation_level=0,
                topics=(build(m.ListOffsetsTopic, name=topic, partitions=tuple(
                    build(m.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                          timestamp=-1, max_num_offsets=1)
                    for p in range(partitions))),)))
            return all(p.error_code == 0 for t in r.topics for p in t.partitions)
        finally:
            client.close()

    def topic(self, prefix: str, partitions: int = 1,
              configs: Mapping[str, str] | None = None) -> str:
        """A new topic with a name no other test uses."""
        return self.create_topic(unique_topic(prefix), partitions, configs)

    def wait_coordinator(self, key: str, key_type: int = 1, timeout: float = 30) -> None:
        """FindCoordinator until it answers: Kafka creates its internal topic on the
        first lookup and answers COORDINATOR_NOT_AVAILABLE until its partitions have
        leaders. ``key_type`` 0 is a group, 1 a transactional id. Raw-wire transaction
        tests call this first, as a client library would."""
        m = request_module(FIND_COORDINATOR, 4)
        deadline = time.monotonic() + timeout
        client = self.raw()
        try:
            while True:
                r = client.request(FIND_COORDINATOR, 4, build(
                    m.FindCoordinatorRequest, key_type=key_type, coordinator_keys=(key,)))
                [c] = r.coordinators
                if c.error_code == 0:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self}: no coordinator for {key!r}: {c}")
                time.sleep(0.2)
        finally:
            client.close()


def _kafka_leg_unavailable() -> str | None:
    if jars_available():
        return None
    why = f"no Kafka jars in {jars_dir()} or no java: run `make kafka-jars`"
    if os.environ.get("CI"):
        pytest.fail(why)  # CI ran make, which fetches them: their absence is a bug
    return why


BROKER_PARAMS = [
    pytest.param("txbroker", id="txbroker"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
]


def running_broker(name: str, tmp_path_factory, config: Mapping[str, str]) -> Iterator[Broker]:
    """Start txbroker (a BrokerThread) or Apache Kafka with ``config``, yield it, stop it:
    the body of a fixture parametrized with BROKER_PARAMS."""
    if name == "txbroker":
        from txbroker.testing import BrokerThread

        thread = BrokerThread(str(tmp_path_factory.mktemp("txbroker-diff")), dict(config))
        thread.start()
        b = Broker("txbroker", thread.host, thread.port)
        try:
            yield b
        finally:
            b.close()
            thread.stop()
        return
    why = _kafka_leg_unavailable()
    if why:
        pytest.skip(why)
    kafka = KafkaProcess(tmp_path_factory.mktemp("kafka"), dict(config))
    kafka.start()
    print(f"\nApache Kafka {kafka_version()} started in {kafka.startup_seconds:.1f}s"
          f" at {kafka.bootstrap}")
    b = Broker("kafka", kafka.host, kafka.port)
    try:
        yield b
    finally:
        b.close()
        if kafka.running:
            kafka.terminate()


@pytest.fixture(scope="session", params=BROKER_PARAMS)
def broker(request, tmp_path_factory) -> Iterator[Broker]:
    """txbroker or Apache Kafka: the same test runs against each. pytest runs all the
    tests of one parameter together, so each broker starts once and stops after its leg."""
    yield from running_broker(request.param, tmp_path_factory, COMMON_CONFIG)


@pytest.fixture(scope="session")
def jvm_classes(tmp_path_factory):
    """tests/jvm/*.java compiled once per session (tests/differential/jvm.py)."""
    from tests.differential.jvm import compile_sources, jvm_available

    why = jvm_available()
    if why:
        pytest.skip(why)
    return compile_sources(tmp_path_factory.mktemp("jvm-classes"))
