"""Rebuild the fuzzer's seed corpus (tests/fuzz/corpus/)::

    .venv/bin/python -m tests.fuzz.capture

1. clients.bin.gz: every request frame that kafka-python, aiokafka and confluent-kafka
   send to an in-process broker while they produce (idempotent, acks=all), consume in
   groups, run transactions and make admin calls. ``Broker.dispatch`` is wrapped to
   record the frames as the broker received them. At most PER_API distinct frames are
   kept per (api key, version), so the corpus stays small.
2. generated.bin.gz: for every advertised (api key, version), a few frames built from
   kio's hypothesis strategies (deterministic: derandomized), so versions no client
   here sends are seeded too.
"""

from __future__ import annotations

import asyncio
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

from .corpus import CLIENTS, GENERATED, api_of, write_frames

PER_API = 12
GENERATED_PER_VERSION = 4


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
    admin.delete_topics(["ck-del"])["ck-del"].result(15)


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
    _try(admin.delete_groups, ["kp-g"])
    admin.close()


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
        with tempfile.TemporaryDirectory() as d, BrokerThread(d) as broker:
            _confluent(broker.bootstrap)
            _kafka_python(broker.bootstrap)
            asyncio.run(_aiokafka(broker.bootstrap))
    finally:
        Broker.dispatch = original  # type: ignore[method-assign]
    return frames


def generate() -> list[bytes]:
    st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
    frames: list[bytes] = []
    for key, low, high in supported_versions():
        for version in range(low, high + 1):
            cls = request_class(key, version)
            if cls is None:
                continue
            examples: list = []

            @settings(max_examples=GENERATED_PER_VERSION * 3, database=None, derandomize=True,
                      deadline=None, suppress_health_check=list(HealthCheck))
            @given(st.from_type(cls))
            def collect(message) -> None:
                examples.append(message)  # noqa: B023 (called right below, in this loop)

            collect()
            cid = uuid.UUID(int=key * 100 + version).hex[:8]
            encoded = [encode_request(key, version, i, cid, m)[4:]
                       for i, m in enumerate(examples)]
            # Skip the trivial first draws; keep a spread of sizes.
            frames += _keep(encoded[-GENERATED_PER_VERSION * 2:], GENERATED_PER_VERSION)
    return frames


def main() -> None:
    captured = _keep(capture_clients(), PER_API)
    write_frames(CLIENTS, captured)
    generated = generate()
    write_frames(GENERATED, generated)
    apis = sorted({api_of(f) for f in captured})
    print(f"clients: {len(captured)} frames, {len(apis)} (api, version) pairs -> {CLIENTS} "
          f"({CLIENTS.stat().st_size} bytes)")
    print(f"generated: {len(generated)} frames -> {GENERATED} ({GENERATED.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
