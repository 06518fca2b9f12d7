"""Rebuild the fuzzer's seed corpus (tests/fuzz/corpus/)::

    .venv/bin/python -m tests.fuzz.capture

1. clients.bin.gz: every request frame that kafka-python, aiokafka and confluent-kafka
   send to an in-process broker while they produce (idempotent, acks=all), consume in
   groups, run transactions and make admin calls. ``Broker.dispatch`` is wrapped to
   record the frames as the broker received them. At most PER_API distinct frames are
   kept per (api key, version), so the corpus stays small.
2. generated.bin.gz: for every advertised (api key, version), a few frames built from
   kio's hypothesis strategies (deterministic: derandomized), so versions no client
   here sends are seeded too. A version kio has no schema for (Produce v0-2, which the
   broker advertises as Kafka 4 does but refuses) gets the nearest version's frames
   under its own version number.
3. upcoming.bin.gz: the same for APIs the broker does not serve yet but clients will
   send (UPCOMING: share groups, KIP-932; streams groups, KIP-1071), every version kio
   has a schema for. Today the broker must close the connection on them, quietly.

``corpus.coverage_gaps`` (checked by tests/fuzz/test_fuzz.py and ``frames
--require-coverage``) fails when an advertised (api key, version) has no frame: a newly
served API or version means running this again.
"""

from __future__ import annotations

import asyncio
import struct
import tempfile
import time
import uuid
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records
from txbroker.broker.handlers import supported_versions
from txbroker.broker.server import Broker
from txbroker.protocol.messages import encode_request, request_class
from txbroker.testing import BrokerThread

from .corpus import CLIENTS, GENERATED, UPCOMING, UPCOMING_APIS, api_of, write_frames

PER_API = 12
GENERATED_PER_VERSION = 4
UPCOMING_PER_VERSION = 3


def _keep(frames: list[bytes], per_api: int) -> list[bytes]:
    """Distinct frames, at most ``per_api`` per (key, version), spread over sizes."""
    groups: dict[tuple[int, int], list[bytes]] = defaultdict(list)
    for f in dict.fromkeys(frames):
        groups[api_of(f)].append(f)
    kept: list[bytes] = []
    for key in sorted(groups):
        fs = sorted(groups[key], key=len)
        step = max(1, len(fs) / per_api)
        kept += [fs[int(i * step)] for i in range(min(per_api, len(fs)))]
    return kept


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("ck", 3, 1), NewTopic("ck-del", 1, 1)]).values():
        f.result(15)
    admin.create_partitions([NewPartitions("ck", 4)])["ck"].result(15)
    admin.describe_configs([ConfigResource("topic", "ck")])
    admin.list_topics(timeout=10)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    for i in range(30):
        p.produce("ck", key=b"k%d" % i, value=b"v" * (i % 7), headers={"h": b"x"})
    p.flush(15)
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-tx"})
    tp.init_transactions(15)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-g",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    c.subscribe(["ck"])
    got, deadline = [], time.time() + 20
    while len(got) < 30 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    for commit in (True, False):
        tp.begin_transaction()
        tp.produce("ck", value=b"txn")
        tp.send_offsets_to_transaction([TopicPartition("ck", 0, 1)],
                                       c.consumer_group_metadata(), 10)
        tp.commit_transaction(15) if commit else tp.abort_transaction(15)
    c.commit(asynchronous=False) if got else None
    c.close()
    admin.list_consumer_groups().result(10)
    admin.describe_consumer_groups(["ck-g"])["ck-g"].result(10)
    _confluent_admin(admin)
    _confluent_consumer_protocol(bootstrap)
    admin.delete_topics(["ck-del"])["ck-del"].result(15)


def _result(futures) -> None:
    """Wait for an admin call's future(s); a failure is printed, not raised."""
    for f in (futures.values() if isinstance(futures, dict) else [futures]):
        try:
            f.result(15)
        except Exception as e:  # noqa: BLE001
            print(f"capture: confluent admin call: {type(e).__name__}: {e}")


def _confluent_admin(admin) -> None:
    """The admin APIs librdkafka speaks: ACLs, configs, records, SCRAM, offsets."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        OffsetSpec,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    acl = AclBinding(ResourceType.TOPIC, "ck", ResourcePatternType.LITERAL, "User:fz", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    acl_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    _result(admin.create_acls([acl]))
    _result(admin.describe_acls(acl_filter))
    _result(admin.delete_acls([acl_filter]))
    _result(admin.alter_configs([ConfigResource("topic", "ck",
                                                set_config={"retention.ms": "3600000"})]))
    _result(admin.incremental_alter_configs([ConfigResource(
        "topic", "ck", incremental_configs=[ConfigEntry(
            "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])]))
    _result(admin.describe_configs([ConfigResource("broker", "0")]))
    _result(admin.delete_records([TopicPartition("ck", 0, 2)]))
    _result(admin.list_offsets({TopicPartition("ck", 0): OffsetSpec.latest(),
                                TopicPartition("ck", 1): OffsetSpec.earliest()}))
    _result(admin.describe_cluster())
    from confluent_kafka import TopicCollection
    _result(admin.describe_topics(TopicCollection(["ck"])))
    _result(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("ck-g")]))
    _result(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "ck-g", [TopicPartition("ck", 0, 1)])]))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    _result(admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("fz", info, b"secret", b"salt"),
        UserScramCredentialDeletion("fz-old", ScramMechanism.SCRAM_SHA_512)]))
    _result(admin.describe_user_scram_credentials(["fz"]))
    _result(admin.describe_user_scram_credentials())


def _confluent_consumer_protocol(bootstrap: str) -> None:
    """A KIP-848 consumer (ConsumerGroupHeartbeat) and the admin's ConsumerGroupDescribe."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-848",
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    c.subscribe(["ck"])
    deadline = time.time() + 10
    while time.time() < deadline and c.assignment() == []:
        c.poll(0.2)
    for _ in range(5):
        c.poll(0.2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _result(admin.describe_consumer_groups(["ck-848"]))
    c.close()
    _result(admin.delete_consumer_groups(["ck-848"]))


def _try(fn, *args) -> None:
    """An admin call whose failure (a newer API, say) must not stop the capture: the
    request frame was recorded either way."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        print(f"capture: {getattr(fn, '__name__', fn)}: {type(e).__name__}: {e}")


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp", 2, 1)])
    _try(admin.list_groups)
    _try(admin.describe_cluster)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(20):
        p.send("kp", key=b"k", value=b"v%d" % i, headers=[("h", b"1")])
    p.flush(15)
    tp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx")
    tp.init_transactions()
    tp.begin_transaction()
    tp.send("kp", b"t")
    tp.commit_transaction()
    p.close()
    tp.close()
    c = KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kp-g",
                      auto_offset_reset="earliest", consumer_timeout_ms=4000)
    for n, _ in enumerate(c):
        if n >= 19:
            break
    c.commit()
    c.close()
    _try(admin.describe_groups, ["kp-g"])
    _try(admin.list_group_offsets, "kp-g")
    _try(admin.list_transactions)
    _try(admin.describe_transactions, ["kp-tx"])
    _try(admin.describe_producers, [__import__("kafka").TopicPartition("kp", 0)])
    _try(admin.create_partitions, {"kp": __import__("kafka.admin").admin.NewPartitions(3)})
    _kafka_python_admin(admin)
    _try(admin.delete_groups, ["kp-g"])
    admin.close()


def _kafka_python_admin(admin) -> None:
    """The admin APIs kafka-python speaks and librdkafka does not (or not the same
    versions): log dirs, features, topic partitions, txn markers, offset delete, ..."""
    from kafka import TopicPartition
    from kafka.admin import (
        ACL,
        AbortTransactionSpec,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    tp = TopicPartition("kp", 0)
    pattern = ResourcePattern(ResourceType.TOPIC, "kp")
    acl = ACL("User:fz", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
    _try(admin.create_acls, [acl])
    any_filter = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(ResourceType.ANY, None,
                                                 ACLResourcePatternType.ANY))
    _try(admin.describe_acls, any_filter)
    _try(admin.delete_acls, [any_filter])
    _try(admin.describe_configs, [ConfigResource(ConfigResourceType.TOPIC, "kp")])
    _try(admin.alter_configs, [ConfigResource(ConfigResourceType.TOPIC, "kp",
                                              {"retention.ms": "7200000"})])
    _try(admin.delete_records, {tp: 1})
    _try(admin.describe_log_dirs)
    _try(admin.describe_topic_partitions, ["kp"])
    _try(admin.describe_features)
    _try(admin.list_partition_offsets, {tp: -1})
    _try(admin.alter_user_scram_credentials, [
        UserScramCredentialUpsertion("kpu", ScramMechanism.SCRAM_SHA_512, "pw"),
        UserScramCredentialDeletion("kpu-old", ScramMechanism.SCRAM_SHA_256)])
    _try(admin.describe_user_scram_credentials, ["kpu"])
    _try(admin.delete_group_offsets, "kp-g", [tp])
    _try(admin.alter_group_offsets, "kp-g", {tp: 0})
    _try(admin.abort_transaction, AbortTransactionSpec(tp, 1000, 0, 0))
    _try(admin.update_features, {"transaction.version": 2}, True)


async def _aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await p.start()
    for i in range(10):
        await p.send_and_wait("ck", b"a%d" % i, key=b"k")
    await p.stop()
    tp = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx")
    await tp.start()
    async with tp.transaction():
        await tp.send("ck", b"t")
    await tp.stop()
    c = AIOKafkaConsumer("ck", bootstrap_servers=bootstrap, group_id="aio-g",
                         auto_offset_reset="earliest", isolation_level="read_committed")
    await c.start()
    try:
        await asyncio.wait_for(c.getmany(timeout_ms=3000), 10)
        await c.commit()
    finally:
        await c.stop()


def capture_clients() -> list[bytes]:
    frames: list[bytes] = []
    original = Broker.dispatch

    def recording(self: Broker, frame: bytes, peer: str):
        frames.append(bytes(frame))
        return original(self, frame, peer)

    Broker.dispatch = recording  # type: ignore[method-assign]
    try:
        # An authorizer (the client a super user) so that the ACL calls get answers.
        overrides = {"authorizer.class.name":
                     "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "super.users": "User:ANONYMOUS"}
        with tempfile.TemporaryDirectory() as d, BrokerThread(d, overrides) as broker:
            _confluent(broker.bootstrap)
            _kafka_python(broker.bootstrap)
            asyncio.run(_aiokafka(broker.bootstrap))
    finally:
        Broker.dispatch = original  # type: ignore[method-assign]
    return frames


def _examples(key: int, version: int, per_version: int) -> list[bytes]:
    """``per_version`` frames (no size prefix) of kio's hypothesis strategy for the
    request class, a spread of sizes; deterministic."""
    cls = request_class(key, version)
    examples: list = []

    @settings(max_examples=per_version * 3, database=None, derandomize=True,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def collect(message) -> None:
        examples.append(message)

    collect()
    cid = uuid.UUID(int=key * 100 + version).hex[:8]
    encoded = [encode_request(key, version, i, cid, m)[4:] for i, m in enumerate(examples)]
    # Skip the trivial first draws; keep a spread of sizes.
    return _keep(encoded[-per_version * 2:], per_version)


def generate() -> list[bytes]:
    st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
    frames: list[bytes] = []
    for key, low, high in supported_versions():
        schema = [v for v in range(low, high + 1) if request_class(key, v) is not None]
        for version in range(low, high + 1):
            if version in schema:
                frames += _examples(key, version, GENERATED_PER_VERSION)
            elif schema:
                # No kio schema (Produce v0-2): the nearest version's body, this version.
                nearest = min(schema, key=lambda v: abs(v - version))  # noqa: B023
                frames += [struct.pack(">hh", key, version) + f[4:]
                           for f in _examples(key, nearest, 2)]
    return frames


def generate_upcoming() -> list[bytes]:
    """Frames for the APIs not served yet (UPCOMING_APIS), every version kio knows."""
    st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
    frames: list[bytes] = []
    for key in UPCOMING_APIS:
        for version in range(0, 16):
            if request_class(key, version) is not None:
                frames += _examples(key, version, UPCOMING_PER_VERSION)
    return frames


def main() -> None:
    captured = _keep(capture_clients(), PER_API)
    write_frames(CLIENTS, captured)
    generated = generate()
    write_frames(GENERATED, generated)
    upcoming = generate_upcoming()
    write_frames(UPCOMING, upcoming)
    apis = sorted({api_of(f) for f in captured})
    print(f"clients: {len(captured)} frames, {len(apis)} (api, version) pairs -> {CLIENTS} "
          f"({CLIENTS.stat().st_size} bytes)")
    print(f"generated: {len(generated)} frames -> {GENERATED} ({GENERATED.stat().st_size} bytes)")
    print(f"upcoming: {len(upcoming)} frames -> {UPCOMING} ({UPCOMING.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
