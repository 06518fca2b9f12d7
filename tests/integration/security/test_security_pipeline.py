"""Issue 15 end to end: an authorized application and an attacker on one secured broker.

The broker has Kafka's StandardAuthorizer, a SASL_SSL listener (SCRAM) and a mutual-TLS
listener whose certificate subjects become principals through
``ssl.principal.mapping.rules``. ``User:app`` holds exactly the ACLs docs/security.md's
"A transactional application" lists and runs the consume-transform-produce pipeline
(read_committed, offsets sent to the transaction) with confluent-kafka, kafka-python and
aiokafka; the auditor (a client certificate, mapped to ``User:auditor``) reads the
result with kcat. ``User:mallory`` authenticates fine but holds no ACL: every protected
operation fails with Kafka's error, as her client reports it, and none of it touches
app's transaction.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from txbroker.protocol.errors import ErrorCode
from txbroker.testing import BrokerThread

from tests.helpers import RawClient, wait_until
from tests.integration.txn_util import (
    describe_producers,
    list_transactions,
    offset_fetch,
    wait_state,
    write_txn_marker,
)
from tests.integration.wire_util import FETCH, fetch_partition, fetch_request

USERS = {"admin": "admin-secret", "app": "app-secret", "mallory": "mallory-secret"}
TXN_ID, ORDERS, PAYMENTS, GROUP = "payments-tx", "orders", "payments", "billing"
# The auditor's certificate subject is CN=Auditor,OU=clients,O=txbroker: the rule maps
# it to User:auditor (lower-cased), the name its ACL uses.
MAPPING_RULES = "RULE:^CN=([^,]+),OU=clients,O=txbroker$/$1/L,DEFAULT"
N = 6  # orders per pipeline run


def _acl(principal: str, rtype, name: str, op) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", op,
                      AclPermissionType.ALLOW)


# docs/security.md, "A transactional application", as CreateAcls bindings.
APP_ACLS = [
    _acl("User:app", ResourceType.TRANSACTIONAL_ID, TXN_ID, AclOperation.WRITE),
    _acl("User:app", ResourceType.TOPIC, PAYMENTS, AclOperation.WRITE),
    _acl("User:app", ResourceType.TOPIC, PAYMENTS, AclOperation.DESCRIBE),
    _acl("User:app", ResourceType.TOPIC, ORDERS, AclOperation.READ),
    _acl("User:app", ResourceType.GROUP, GROUP, AclOperation.READ),
]
AUDITOR_ACLS = [_acl("User:auditor", ResourceType.TOPIC, PAYMENTS, AclOperation.READ)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("pipeline") / "data")
    overrides = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:admin", "group.initial.rebalance.delay.ms": "0",
                 "listener.name.mtls.ssl.client.auth": "required"}
    with BrokerThread(data, overrides, listeners={"SASL_SSL": "SASL_SSL", "MTLS": "SSL"},
                      users=USERS, principal_mapping_rules=MAPPING_RULES) as b:
        b.create_topic(ORDERS)
        b.create_topic(PAYMENTS)
        admin = AdminClient(conf(b, "admin"))
        for f in admin.create_acls(APP_ACLS + AUDITOR_ACLS, request_timeout=15).values():
            f.result()
        yield b


def conf(broker, user: str, **extra) -> dict:
    return {**broker.client_config("SASL_SSL", user), **extra}


def produce_orders(broker, tag: str) -> list[bytes]:
    values = [f"{tag}-{i}".encode() for i in range(N)]
    p = Producer(conf(broker, "admin"))
    for v in values:
        p.produce(ORDERS, v)
    assert p.flush(15) == 0
    return values


def read_committed_payments(broker) -> list[bytes]:
    """Every committed payment, read as the auditor with kcat over mutual TLS."""
    cert, key = broker.certs.client_certificate("Auditor")
    host_port = broker.bootstrap_for("MTLS")
    run = subprocess.run(
        ["kcat", "-b", host_port, "-X", "security.protocol=SSL",
         "-X", f"ssl.ca.location={broker.certs.ca_file}",
         "-X", f"ssl.certificate.location={cert}", "-X", f"ssl.key.location={key}",
         "-X", "isolation.level=read_committed", "-C", "-t", PAYMENTS, "-o", "beginning",
         "-e", "-q", "-f", "%s\n"], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def transform(value: bytes) -> bytes:
    return b"paid:" + value


def pipeline_confluent(broker) -> None:
    consumer = Consumer(conf(broker, "app", **{
        "group.id": GROUP, "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest"}))
    producer = Producer(conf(broker, "app", **{"transactional.id": TXN_ID}))
    producer.init_transactions(15)
    consumer.subscribe([ORDERS])
    try:
        msgs: list = []
        assert wait_until(lambda: msgs.extend(
            m for m in consumer.consume(N - len(msgs), 0.5) if m.error() is None)
            or len(msgs) >= N, timeout=30)
        producer.begin_transaction()
        for m in msgs:
            producer.produce(PAYMENTS, transform(m.value()))
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 15)
        producer.commit_transaction(15)
    finally:
        consumer.close()


def kafka_python_security(broker, user: str) -> dict:
    return dict(bootstrap_servers=broker.bootstrap_for("SASL_SSL"), security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                sasl_plain_password=USERS[user], ssl_cafile=broker.certs.ca_file)


def pipeline_kafka_python(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata

    security = kafka_python_security(broker, "app")
    consumer = KafkaConsumer(group_id=GROUP, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest", **security)
    producer = KafkaProducer(transactional_id=TXN_ID, **security)
    try:
        producer.init_transactions()
        consumer.subscribe([ORDERS])
        msgs: list = []
        assert wait_until(lambda: msgs.extend(
            m for batch in consumer.poll(500, max_records=N - len(msgs)).values() for m in batch)
            or len(msgs) >= N, timeout=30)
        producer.begin_transaction()
        for m in msgs:
            producer.send(PAYMENTS, transform(m.value))
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()},
            consumer.group_metadata())
        producer.commit_transaction()
    finally:
        producer.close()
        consumer.close()


def pipeline_aiokafka(broker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    security = dict(bootstrap_servers=broker.bootstrap_for("SASL_SSL"),
                    security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                    sasl_plain_username="app", sasl_plain_password=USERS["app"],
                    ssl_context=create_ssl_context(cafile=broker.certs.ca_file))

    async def run() -> None:
        consumer = AIOKafkaConsumer(ORDERS, group_id=GROUP, isolation_level="read_committed",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    **security)
        producer = AIOKafkaProducer(transactional_id=TXN_ID, **security)
        await consumer.start()
        await producer.start()
        try:
            msgs: list = []
            for _ in range(60):
                got = await consumer.getmany(timeout_ms=500, max_records=N - len(msgs))
                msgs.extend(m for batch in got.values() for m in batch)
                if len(msgs) >= N:
                    break
            assert len(msgs) == N
            async with producer.transaction():
                for m in msgs:
                    await producer.send(PAYMENTS, transform(m.value))
                await producer.send_offsets_to_transaction(
                    {tp: await consumer.position(tp) for tp in consumer.assignment()}, GROUP)
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(run())


PIPELINES = {"confluent-kafka": pipeline_confluent, "kafka-python": pipeline_kafka_python,
             "aiokafka": pipeline_aiokafka}


@pytest.mark.parametrize("client", list(PIPELINES))
def test_authorized_application_runs_the_transactional_pipeline(broker, client):
    """Each run processes the N orders after the group's committed offset, exactly once:
    their payments are committed, and the auditor (mTLS principal from the mapping
    rules) reads them with read_committed."""
    orders = produce_orders(broker, f"{client}-{uuid.uuid4().hex[:6]}")
    PIPELINES[client](broker)
    payments = read_committed_payments(broker)
    assert [p for p in payments if p.split(b":", 1)[1] in orders] == \
        [transform(v) for v in orders]
    # The offsets went into the transaction: the group's committed offset is the end.
    raw = RawClient.as_user(broker, "SASL_SSL", "app")
    try:
        got = offset_fetch(raw, GROUP, [(ORDERS, 0)])
    finally:
        raw.close()
    assert got[(ORDERS, 0)] == (0, broker.high_watermark(ORDERS))


def test_auditor_reads_only_committed_payments(broker):
    """An aborted transaction of app's is invisible to the auditor's read_committed kcat."""
    p = Producer(conf(broker, "app", **{"transactional.id": TXN_ID}))
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(PAYMENTS, b"paid:aborted-one")
    p.flush(15)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(PAYMENTS, b"paid:kept-one")
    p.commit_transaction(15)
    payments = read_committed_payments(broker)
    assert b"paid:kept-one" in payments and b"paid:aborted-one" not in payments


def test_mallory_cannot_produce_consume_or_use_the_group(broker):
    mallory = conf(broker, "mallory")
    # Produce: TOPIC_AUTHORIZATION_FAILED on delivery.
    p = Producer({**mallory, "message.timeout.ms": 5000})
    errors: list = []
    p.produce(PAYMENTS, b"forged", on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # Consume in app's group: GROUP_AUTHORIZATION_FAILED.
    c = Consumer({**mallory, "group.id": GROUP, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([ORDERS])
        seen: list = []
        assert wait_until(lambda: seen.extend(
            m.error().code() for m in c.consume(5, 0.5) if m.error() is not None)
            or KafkaError.GROUP_AUTHORIZATION_FAILED in seen, timeout=20), seen
    finally:
        c.close()
    # Commit offsets for app's group (kafka-python: librdkafka only reports that it
    # waits for a coordinator, as FindCoordinator is refused): GROUP_AUTHORIZATION_FAILED.
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KPTopicPartition
    from kafka.errors import GroupAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata

    kc = KafkaConsumer(group_id=GROUP, enable_auto_commit=False, **kafka_python_security(
        broker, "mallory"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            kc.commit({KPTopicPartition(ORDERS, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        kc.close()
    # Fetch: her clients never get that far (Metadata already refuses the topic), so
    # raw, as a hostile client sends it: TOPIC_AUTHORIZATION_FAILED.
    raw = RawClient.as_user(broker, "SASL_SSL", "mallory")
    try:
        r = raw.request(FETCH, 12, fetch_request({ORDERS: {0: 0}}))
        assert fetch_partition(r, ORDERS, 0).error_code == ErrorCode.topic_authorization_failed
    finally:
        raw.close()
    # Metadata hides both topics from her, and shows app what its ACLs describe.
    assert not {ORDERS, PAYMENTS} & set(AdminClient(mallory).list_topics(timeout=10).topics)
    assert {ORDERS, PAYMENTS} <= set(AdminClient(conf(broker, "app")).list_topics(timeout=10).topics)


def _mallory_init_transactions(broker, client: str) -> str:
    """Mallory's client initializing app's transactional.id: the error it reports."""
    if client == "confluent-kafka":
        p = Producer(conf(broker, "mallory", **{"transactional.id": TXN_ID}))
        with pytest.raises(KafkaException) as e:
            p.init_transactions(15)
        return e.value.args[0].name()
    if client == "kafka-python":
        from kafka import KafkaProducer
        from kafka.errors import KafkaError as KPError

        p = KafkaProducer(transactional_id=TXN_ID, **kafka_python_security(broker, "mallory"))
        try:
            with pytest.raises(KPError) as e:
                p.init_transactions()
            return type(e.value).__name__
        finally:
            p.close(timeout=5)
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AIOError
    from aiokafka.helpers import create_ssl_context

    async def run() -> str:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_for("SASL_SSL"),
                             security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="mallory", sasl_plain_password=USERS["mallory"],
                             ssl_context=create_ssl_context(cafile=broker.certs.ca_file),
                             transactional_id=TXN_ID)
        try:
            with pytest.raises(AIOError) as e:
                await p.start()
            return type(e.value).__name__
        finally:
            await p.stop()

    return asyncio.run(run())


def test_mallory_cannot_fence_or_abort_apps_transaction(broker):
    """With app's transaction open: mallory's InitProducerId for app's transactional.id
    (every client) gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, her raw WriteTxnMarkers
    abort CLUSTER_AUTHORIZATION_FAILED; app's commit then succeeds and is what
    read_committed readers see; mallory sees no trace of app's transaction."""
    app = Producer(conf(broker, "app", **{"transactional.id": TXN_ID}))
    app.init_transactions(15)
    app.begin_transaction()
    app.produce(PAYMENTS, b"paid:precious")
    app.flush(15)
    state = wait_state(broker, TXN_ID, ["Ongoing"])
    for client in ("confluent-kafka", "kafka-python", "aiokafka"):
        assert _mallory_init_transactions(broker, client) in (
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",  # confluent-kafka
            "TransactionalIdAuthorizationFailedError",  # kafka-python
            "TransactionalIdAuthorizationFailed")  # aiokafka
    before = broker.high_watermark(PAYMENTS)
    raw = RawClient.as_user(broker, "SASL_SSL", "mallory")
    try:
        assert write_txn_marker(raw, (PAYMENTS, 0), state["producer_id"], state["producer_epoch"],
                                commit=False, coordinator_epoch=0) == \
            ErrorCode.cluster_authorization_failed
        assert broker.high_watermark(PAYMENTS) == before  # no ABORT marker written
        # Filtered views: no transactional id, no producers of a topic she cannot read.
        listed = list_transactions(raw)
        assert listed.error_code == ErrorCode.none and TXN_ID not in {
            t.transactional_id for t in listed.transaction_states}
        assert describe_producers(raw, (PAYMENTS, 0)).error_code == \
            ErrorCode.topic_authorization_failed
    finally:
        raw.close()
    assert wait_state(broker, TXN_ID, ["Ongoing"])["producer_epoch"] == state["producer_epoch"]
    app.commit_transaction(15)  # not fenced
    assert b"paid:precious" in read_committed_payments(broker)
    # The same views as app: its own transactional id is listed.
    raw = RawClient.as_user(broker, "SASL_SSL", "app")
    try:
        assert TXN_ID in {t.transactional_id for t in list_transactions(raw).transaction_states}
    finally:
        raw.close()


def test_mallory_describe_transactions_is_refused(broker, tmp_path, capsys, monkeypatch):
    """DescribeTransactions without DESCRIBE on the transactional id, through the
    transactions tool with mallory's --command-config: TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    import io

    from txbroker.tools import transactions as transactions_cli

    from txbroker.cli import main

    def describe(user: str) -> tuple[int, str, str]:
        props = tmp_path / f"{user}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in conf(broker, user).items()))
        out = io.StringIO()
        monkeypatch.setattr(transactions_cli, "OUT", out)  # bound to sys.stdout at import
        code = main(["transactions", "--command-config", str(props), "describe",
                     "--transactional-id", TXN_ID])
        return code, out.getvalue(), capsys.readouterr().err

    code, _out, err = describe("mallory")
    assert code == 1 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in err, err
    code, out, err = describe("app")
    assert code == 0 and TXN_ID in out, (out, err)
