"""ACLs with real clients against a broker with Kafka's StandardAuthorizer switched on.

The clients authenticate with SCRAM-SHA-256 over SASL_PLAINTEXT (the secured test
broker of testing/security.py): the super user User:admin creates the ACLs, and
the ACLs under test are for User:alice (or User:*). Raw requests authenticate too
(``RawClient.as_user``).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from txbroker.broker.security.acl_store import ACL_FILE
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module
from txbroker.testing import BrokerProcess, BrokerThread

from tests.helpers import RawClient, wait_until
from tests.integration.txn_util import write_txn_marker
from tests.integration.wire_util import INIT_PRODUCER_ID

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LISTENER = "SASL_PLAINTEXT"
ALICE = "User:alice"
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
DESCRIBE_ACLS = 29
MINUTE = datetime.timedelta(minutes=1)
SECURE = {"authorizer.class.name": STANDARD, "super.users": "User:admin",
          "group.initial.rebalance.delay.ms": "0"}


def secured_broker(data_dir: str, overrides=SECURE) -> BrokerThread:
    return BrokerThread(data_dir, overrides, listeners=[LISTENER], users=USERS)


@pytest.fixture
def secured(tmp_path):
    with secured_broker(str(tmp_path / "data")) as broker:
        yield broker


def conf(broker, user: str = "alice", **extra) -> dict:
    return {**broker.client_config(LISTENER, user), **extra}


def admin(broker, user: str = "admin") -> AdminClient:
    return AdminClient(conf(broker, user))


def allow(name: str, op, rtype=ResourceType.TOPIC, pattern=ResourcePatternType.LITERAL,
          principal: str = ALICE, perm=AclPermissionType.ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def deny(name: str, op, **kwargs) -> AclBinding:
    return allow(name, op, perm=AclPermissionType.DENY, **kwargs)


def create_acls(broker, *acls: AclBinding) -> None:
    client = admin(broker)  # kept alive until the answers are in
    for f in client.create_acls(list(acls), request_timeout=10).values():
        f.result()


def produce_error(broker, topic: str, user: str = "alice") -> KafkaError | None:
    """Produce one record (acks=all); the delivery error, None if it was written."""
    p = Producer(conf(broker, user, **{"message.timeout.ms": 5000,
                                       "topic.metadata.refresh.interval.ms": 200}))
    errors: list = []
    p.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert len(errors) == 1
    return errors[0]


def raw_request(broker, api_key: int, version: int, message, user: str = "alice"):
    raw = RawClient.as_user(broker, LISTENER, user)
    try:
        return raw.request(api_key, version, message)
    finally:
        raw.close()


def new_topic(broker, name: str | None = None) -> str:
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name)
    return name


def test_the_principals_are_the_authenticated_users(secured):
    """What every test below relies on: each connection acts as its SCRAM user."""
    a = admin(secured, "alice")

    def alice_connected() -> bool:
        # librdkafka drops its bootstrap connection once it knows the broker by id and
        # connects again: between the two, alice has no open connection.
        a.list_topics(timeout=10)
        return ALICE in {principal for _peer, _listener, principal in secured.sessions()}

    assert wait_until(alice_connected, timeout=10, interval=0.1)


def test_produce_denied_then_allowed_after_create_acls(secured):
    topic = new_topic(secured)
    create_acls(secured, allow(topic, AclOperation.DESCRIBE))
    err = produce_error(secured, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_acls(secured, allow(topic, AclOperation.WRITE))
    assert produce_error(secured, topic) is None
    assert secured.high_watermark(topic) == 1


def test_deny_wins_over_allow(secured):
    topic = new_topic(secured)
    create_acls(secured, allow("*", AclOperation.ALL), deny(topic, AclOperation.WRITE))
    err = produce_error(secured, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    other = new_topic(secured)
    assert produce_error(secured, other) is None


def test_prefixed_acls(secured):
    pay, other = new_topic(secured, "payments-eu"), new_topic(secured, "orders-eu")
    create_acls(secured, allow("payments-", AclOperation.WRITE,
                               pattern=ResourcePatternType.PREFIXED),
                allow("*", AclOperation.DESCRIBE))
    assert produce_error(secured, pay) is None
    err = produce_error(secured, other)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_lists_only_describable_topics(secured):
    seen, hidden = new_topic(secured), new_topic(secured)
    create_acls(secured, allow(seen, AclOperation.READ))
    listed = admin(secured, "alice").list_topics(timeout=10).topics
    assert seen in listed and hidden not in listed
    # Named explicitly: TOPIC_AUTHORIZATION_FAILED, not whether it exists.
    md = admin(secured, "alice").list_topics(topic=hidden, timeout=10)
    assert md.topics[hidden].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert hidden in admin(secured).list_topics(timeout=10).topics  # the super user


def test_super_users_bypass_every_check(tmp_path):
    overrides = {**SECURE, "super.users": f"User:admin;{ALICE}"}
    with secured_broker(str(tmp_path / "data"), overrides) as broker:
        topic = new_topic(broker)
        assert produce_error(broker, topic) is None


def test_allow_everyone_if_no_acl_found(tmp_path):
    overrides = {**SECURE, "allow.everyone.if.no.acl.found": "true"}
    with secured_broker(str(tmp_path / "data"), overrides) as broker:
        free, guarded = new_topic(broker), new_topic(broker)
        assert produce_error(broker, free) is None
        # Once an ACL names the topic, only what the ACLs allow is allowed.
        create_acls(broker, allow(guarded, AclOperation.DESCRIBE))
        err = produce_error(broker, guarded)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_init_producer_id_without_write_on_transactional_id(secured):
    topic = new_topic(secured)
    create_acls(secured, allow(topic, AclOperation.WRITE),
                allow("app-tx", AclOperation.DESCRIBE, rtype=ResourceType.TRANSACTIONAL_ID))
    p = Producer(conf(secured, **{"transactional.id": "app-tx"}))
    with pytest.raises(KafkaException) as e:
        p.init_transactions(10)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Raw, as any client sends it.
    m = request_module(INIT_PRODUCER_ID, 4)
    r = raw_request(secured, INIT_PRODUCER_ID, 4, build(
        m.InitProducerIdRequest, transactional_id="app-tx", transaction_timeout=MINUTE,
        producer_id=-1, producer_epoch=-1))
    assert r.error_code == ErrorCode.transactional_id_authorization_failed


def test_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(secured):
    m = request_module(INIT_PRODUCER_ID, 4)

    def init_pid():
        return raw_request(secured, INIT_PRODUCER_ID, 4, build(
            m.InitProducerIdRequest, transactional_id=None, transaction_timeout=MINUTE,
            producer_id=-1, producer_epoch=-1)).error_code

    assert init_pid() == ErrorCode.cluster_authorization_failed
    create_acls(secured, allow("logs-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
    assert init_pid() == ErrorCode.none


def _txn_acls(topic: str, txn_id: str) -> list[AclBinding]:
    return [allow(topic, AclOperation.ALL),
            allow(txn_id, AclOperation.WRITE, rtype=ResourceType.TRANSACTIONAL_ID),
            allow("g-", AclOperation.READ, rtype=ResourceType.GROUP,
                  pattern=ResourcePatternType.PREFIXED)]


def test_raw_write_txn_markers_cannot_abort_someone_elses_transaction(secured):
    """Issue 15's attack: without CLUSTER_ACTION a raw WriteTxnMarkers gets
    CLUSTER_AUTHORIZATION_FAILED, writes nothing, and the victim commits."""
    topic = new_topic(secured)
    create_acls(secured, *_txn_acls(topic, "victim"))
    p = Producer(conf(secured, **{"transactional.id": "victim"}))
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"precious")
    p.flush(10)
    before = secured.high_watermark(topic)
    state = secured.call(lambda b: b.transactions.state.inspect("victim"))
    raw = RawClient.as_user(secured, LISTENER, "alice")
    try:
        error = write_txn_marker(raw, (topic, 0), state["producer_id"], state["producer_epoch"],
                                 commit=False, coordinator_epoch=0)
    finally:
        raw.close()
    assert error == ErrorCode.cluster_authorization_failed
    assert secured.high_watermark(topic) == before  # no marker written
    p.commit_transaction(10)
    c = Consumer(conf(secured, **{"group.id": "g-reader", "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([topic])
        got = []
        assert wait_until(lambda: got.extend(
            m.value() for m in c.consume(10, 0.5) if m.error() is None) or got, timeout=20)
        assert got == [b"precious"]
    finally:
        c.close()


def test_transactional_pipeline_with_acls(secured):
    """An authorized application: transactional produce, offsets sent to the
    transaction (AddOffsetsToTxn/TxnOffsetCommit need READ on the group)."""
    topic = new_topic(secured)
    create_acls(secured, *_txn_acls(topic, "app"))
    p = Producer(conf(secured, **{"transactional.id": "app"}))
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"x")
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    c = Consumer(conf(secured, **{"group.id": "g-app"}))
    try:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], c.consumer_group_metadata(),
                                      10)
    finally:
        c.close()
    p.commit_transaction(10)
    client = admin(secured)
    committed = client.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("g-app")])["g-app"].result()
    assert [tp.offset for tp in committed.topic_partitions] == [1]


def test_group_without_read_gets_group_authorization_failed(secured):
    topic = new_topic(secured)
    create_acls(secured, allow(topic, AclOperation.READ))
    c = Consumer(conf(secured, **{"group.id": "no-acl-group", "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([topic])
        errors = []
        assert wait_until(lambda: errors.extend(
            m.error().code() for m in c.consume(5, 0.5) if m.error() is not None) or errors,
            timeout=20)
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in errors
    finally:
        c.close()


def test_describe_and_delete_acls_with_filters(secured):
    a = admin(secured)
    create_acls(secured, allow("pay", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
                allow("payments", AclOperation.WRITE), allow("*", AclOperation.DESCRIBE))
    match = AclBindingFilter(ResourceType.TOPIC, "payments", ResourcePatternType.MATCH, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)
    assert len(a.describe_acls(match).result(10)) == 3
    literal = AclBindingFilter(ResourceType.TOPIC, "payments", ResourcePatternType.LITERAL,
                               None, None, AclOperation.ANY, AclPermissionType.ANY)
    [only] = a.describe_acls(literal).result(10)
    assert only.operation == AclOperation.WRITE
    [deleted] = a.delete_acls([literal])[literal].result(10)
    assert deleted.name == "payments"
    assert len(a.describe_acls(match).result(10)) == 2
    # Not allowed to describe the cluster's ACLs: CLUSTER_AUTHORIZATION_FAILED.
    # Without DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED (raw: confluent-kafka
    # 2.16 turns a DescribeAcls error into an empty list).
    m = request_module(DESCRIBE_ACLS, 3)
    r = raw_request(secured, DESCRIBE_ACLS, 3, build(
        m.DescribeAclsRequest, resource_type_filter=1, resource_name_filter=None,
        pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
        permission_type=1))
    assert r.error_code == ErrorCode.cluster_authorization_failed and r.resources == ()


def test_acl_apis_without_authorizer_answer_security_disabled(tmp_path):
    with BrokerThread(str(tmp_path / "data"), listeners=[LISTENER], users=USERS) as broker:
        client = admin(broker)
        fs = client.create_acls([allow("t", AclOperation.READ)], request_timeout=10)
        with pytest.raises(KafkaException) as e:
            next(iter(fs.values())).result()
        assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED
        # ... and everything else is allowed, as before.
        assert produce_error(broker, new_topic(broker)) is None


def test_acls_survive_sigkill(tmp_path):
    data = str(tmp_path / "data")
    binding = allow("kept", AclOperation.READ, principal="User:bob")
    with BrokerProcess(data, SECURE, listeners=[LISTENER], users=USERS) as broker:
        create_acls(broker, binding)
        broker.kill()  # SIGKILL right after the answer: it was fsynced before it
    assert os.path.exists(os.path.join(data, ACL_FILE))
    with BrokerProcess(data, SECURE, listeners=[LISTENER], users=USERS) as broker:
        client = admin(broker)
        got = client.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(10)
        assert got == [binding]


def test_unknown_authorizer_class_is_a_configuration_error(tmp_path):
    """Exit 2 with one line at start, naming the key (never a broker without the ACLs
    its operator asked for)."""
    run = subprocess.run(
        [sys.executable, "-m", "txbroker", "serve", "--port", "0", "--data-dir",
         str(tmp_path / "data"), "--override", "authorizer.class.name=kafka.security.Nope"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "authorizer.class.name" in lines[0], lines


def test_acls_tool_add_list_remove(secured, capsys, tmp_path):
    """``txbroker acls`` with kafka-acls.sh's options, as User:admin (--command-config)."""
    from txbroker.cli import main

    props = tmp_path / "admin.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in conf(secured, "admin").items()))
    server = ["--command-config", str(props)]
    assert main(["acls", *server, "--add", "--allow-principal", "User:alice", "--operation",
                 "Read", "--operation", "Describe", "--topic", "orders", "--group", "bill-",
                 "--resource-pattern-type", "prefixed"]) == 0
    assert main(["acls", "add", *server, "--deny-principal", "User:*", "--deny-host",
                 "10.0.0.9", "--operation", "IdempotentWrite", "--cluster"]) == 0
    capsys.readouterr()
    assert main(["acls", *server, "--list"]) == 0
    listed = capsys.readouterr().out
    assert ("Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=bill-, "
            "patternType=PREFIXED)`") in listed
    assert ("(principal=User:*, host=10.0.0.9, operation=IDEMPOTENT_WRITE, "
            "permissionType=DENY)") in listed
    assert listed.count("principal=User:alice") == 4
    assert main(["acls", *server, "--remove", "--force", "--topic", "orders",
                 "--resource-pattern-type", "prefixed"]) == 0
    assert capsys.readouterr().out.count("Removed") == 2
    assert main(["acls", *server, "--list", "--topic", "orders", "--resource-pattern-type",
                 "any"]) == 0
    assert "orders" not in capsys.readouterr().out
    # Refused bindings are reported and fail the command.
    assert main(["acls", *server, "--add", "--allow-principal", "User:bob",
                 "--resource-pattern-type", "match", "--topic", "t"]) == 1

