"""ACL edge cases where txbroker must answer as Kafka's StandardAuthorizer and controller:
the 10000-record limit of CreateAcls/DeleteAcls, DescribeAcls with the USER resource type
below v3, Fetch long-polling the readable partitions beside unauthorized ones, and
Metadata by topic id for an undescribable topic.

Both brokers have Kafka's StandardAuthorizer, a PLAINTEXT listener whose principal
(User:ANONYMOUS) is a super user (on Kafka also the controller's and the broker's own
principal) and a SASL_PLAINTEXT listener where ``alice`` (SCRAM-SHA-256) holds only the
ACLs a test gives her. The Kafka leg carries the ``kafka`` marker (``make test-kafka``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from txbroker.client.security import SCRAM_MODULE
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module
from txbroker.testing import BrokerThread

from tests.differential.conftest import _kafka_leg_unavailable
from tests.helpers import RawClient, wait_until
from tests.integration.wire_util import FETCH, METADATA, fetch_partition, fetch_request
from tests.kafka_reference import KafkaProcess

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
ALICE_PASSWORD = "alice-secret"
ALICE = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "alice", "sasl.password": ALICE_PASSWORD}
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0"}
# TOPIC=2 USER=7; LITERAL=3 PREFIXED=4 ANY=1; READ=3 ALTER=7 ... ALLOW=3 ANY=1
TOPIC, USER, LITERAL, READ, ALLOW = 2, 7, 3, 3, 3


class Secured:
    def __init__(self, name: str, host: str, plaintext: int, sasl: int) -> None:
        self.name, self.host, self.plaintext, self.sasl = name, host, plaintext, sasl

    def super_user(self) -> RawClient:
        return RawClient(self.host, self.plaintext)

    def alice(self) -> RawClient:
        return RawClient(self.host, self.sasl, security=ALICE)

    def request(self, api_key: int, version: int, message, *, as_alice: bool = False):
        client = self.alice() if as_alice else self.super_user()
        try:
            return client.request(api_key, version, message)
        finally:
            client.close()

    def create_topic(self) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"acl-edge-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": f"{self.host}:{self.plaintext}"})
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        # Kafka answers CreateTopics before the partition has a leader: wait for one.
        md = request_module(METADATA, 12)
        for _ in range(100):
            r = self.request(METADATA, 12, build(
                md.MetadataRequest, topics=(build(md.MetadataRequestTopic, name=name,
                                                  topic_id=None),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            if r.topics[0].error_code == 0 and r.topics[0].partitions and \
                    r.topics[0].partitions[0].leader_id >= 0:
                return name
            threading.Event().wait(0.1)
        raise AssertionError(f"{name} has no leader")


@pytest.fixture(scope="module", params=[
    pytest.param("txbroker", id="txbroker"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
])
def secured(request, tmp_path_factory) -> Iterator[Secured]:
    if request.param == "txbroker":
        data = str(tmp_path_factory.mktemp("acl-edges") / "data")
        with BrokerThread(data, AUTHORIZER, listeners=["PLAINTEXT", "SASL_PLAINTEXT"],
                          users={"alice": ALICE_PASSWORD},
                          sasl_mechanisms=("SCRAM-SHA-256",)) as b:
            yield Secured("txbroker", "127.0.0.1", b.broker.listeners_by_name["PLAINTEXT"].port,
                          b.broker.listeners_by_name["SASL_PLAINTEXT"].port)
        return
    why = _kafka_leg_unavailable()
    if why:
        pytest.skip(why)
    kafka = KafkaProcess(
        tmp_path_factory.mktemp("kafka-acl-edges"),
        {**AUTHORIZER, "sasl.enabled.mechanisms": "SCRAM-SHA-256",
         "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
             f"{SCRAM_MODULE} required;"},
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        scram=[f"SCRAM-SHA-256=[name=alice,password={ALICE_PASSWORD}]"])
    kafka.start()
    try:
        yield Secured("kafka", kafka.host, kafka.ports["PLAINTEXT"], kafka.ports["SASL_PLAINTEXT"])
    finally:
        if kafka.running:
            kafka.terminate()


def _creations(m, names, rtype: int = TOPIC, principal: str = "User:bob") -> tuple:
    return tuple(build(m.AclCreation, resource_type=rtype, resource_name=n,
                       resource_pattern_type=LITERAL, principal=principal, host="*",
                       operation=READ, permission_type=ALLOW) for n in names)


def _create(secured: Secured, names, **kwargs):
    m = request_module(CREATE_ACLS, 3)
    return secured.request(CREATE_ACLS, 3, build(
        m.CreateAclsRequest, creations=_creations(m, names, **kwargs))).results


def _delete(secured: Secured, *filters):
    return secured.request(DELETE_ACLS, 3, build(
        request_module(DELETE_ACLS, 3).DeleteAclsRequest, filters=filters)).filter_results


def _filter(name: str | None, principal: str | None):
    m = request_module(DELETE_ACLS, 3)
    return build(m.DeleteAclsFilter, resource_type_filter=TOPIC, resource_name_filter=name,
                 pattern_type_filter=LITERAL, principal_filter=principal, host_filter=None,
                 operation=READ, permission_type=1)


def _allow_alice_read(secured: Secured, topic: str) -> None:
    [r] = _create(secured, [topic], principal="User:alice")
    assert r.error_code == ErrorCode.none
    m = request_module(METADATA, 12)

    def visible() -> bool:  # Kafka's brokers apply the controller's ACL record a bit later
        return secured.request(METADATA, 12, build(
            m.MetadataRequest, topics=(build(m.MetadataRequestTopic, name=topic, topic_id=None),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False),
            as_alice=True).topics[0].error_code == 0

    assert wait_until(visible, timeout=10)


def test_more_than_10000_acls_in_one_request(secured) -> None:
    tag = uuid.uuid4().hex[:6]
    principal = f"User:bulk-{tag}"
    bulk = [f"b-{tag}-{i}" for i in range(10000)]
    results = _create(secured, [*bulk, f"extra-{tag}"], principal=principal)
    assert {(r.error_code, r.error_message) for r in results} == {
        (ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")}
    assert {r.error_code for r in _create(secured, bulk, principal=principal)} == {0}
    assert _create(secured, [f"extra-{tag}"], principal=principal)[0].error_code == 0
    # Together the two filters match 10001 ACLs: the whole request is refused, every
    # filter with INVALID_REQUEST and Kafka's controller's message, and nothing removed.
    too_many = "Cannot remove more than 10000 acls in a single delete operation."
    results = _delete(secured, _filter(f"extra-{tag}", principal), _filter(None, principal))
    assert [(r.error_code, r.error_message, r.matching_acls) for r in results] == \
        [(ErrorCode.invalid_request, too_many, ())] * 2
    [extra] = _delete(secured, _filter(f"extra-{tag}", principal))
    assert extra.error_code == 0 and len(extra.matching_acls) == 1
    [rest] = _delete(secured, _filter(None, principal))  # exactly 10000: allowed
    assert rest.error_code == 0 and len(rest.matching_acls) == 10000


@pytest.mark.parametrize("version", [1, 2, 3])
def test_describe_acls_user_resource_type(secured, version) -> None:
    name = f"carol-{uuid.uuid4().hex[:6]}"
    assert _create(secured, [name], rtype=USER)[0].error_code == 0
    m = request_module(DESCRIBE_ACLS, version)

    def describe():
        return secured.request(DESCRIBE_ACLS, version, build(
            m.DescribeAclsRequest, resource_type_filter=USER, resource_name_filter=name,
            pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
            permission_type=1))

    # Kafka's brokers see a new ACL once the controller's record reaches them.
    assert wait_until(lambda: describe().resources, timeout=10)
    r = describe()
    assert r.error_code == 0
    assert [(x.resource_type, x.resource_name) for x in r.resources] == [(USER, name)]


def test_fetch_long_polls_the_readable_partitions(secured) -> None:
    from confluent_kafka import Producer

    readable, denied = secured.create_topic(), secured.create_topic()
    _allow_alice_read(secured, readable)

    def produce() -> None:
        p = Producer({"bootstrap.servers": f"{secured.host}:{secured.plaintext}"})
        p.produce(readable, b"late")
        p.flush(15)

    timer = threading.Timer(0.5, produce)
    timer.start()
    try:
        r = secured.request(FETCH, 12, fetch_request({readable: {0: 0}, denied: {0: 0}},
                                                     max_wait_ms=20000), as_alice=True)
    finally:
        timer.join()
    assert fetch_partition(r, denied, 0).error_code == ErrorCode.topic_authorization_failed
    got = fetch_partition(r, readable, 0)
    assert got.error_code == 0 and got.records


def test_metadata_by_topic_id_of_an_undescribable_topic(secured) -> None:
    hidden = secured.create_topic()
    m = request_module(METADATA, 12)

    def metadata(item, as_alice: bool):
        return secured.request(METADATA, 12, build(
            m.MetadataRequest, topics=(item,), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), as_alice=as_alice).topics[0]

    topic_id = metadata(build(m.MetadataRequestTopic, name=hidden, topic_id=None), False).topic_id
    assert topic_id is not None
    t = metadata(build(m.MetadataRequestTopic, name=None, topic_id=topic_id), True)
    assert (t.error_code, t.name, t.topic_id) == \
        (ErrorCode.topic_authorization_failed, None, topic_id)
    t = metadata(build(m.MetadataRequestTopic, name=hidden, topic_id=None), True)
    assert (t.error_code, t.name, t.topic_id) == \
        (ErrorCode.topic_authorization_failed, hidden, None)


def test_an_unauthorized_principal_cannot_see_or_abort_a_transaction(secured) -> None:
    """Issue 15's attack and Kafka's filtering (KIP-664): with a transaction open, alice
    (no ACL) does not find it in ListTransactions, gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    from DescribeTransactions and TOPIC_AUTHORIZATION_FAILED from DescribeProducers, and
    her raw WriteTxnMarkers abort gets CLUSTER_AUTHORIZATION_FAILED; with DESCRIBE on the
    transactional id only, she sees the transaction without its topic. The producer then
    commits and a read_committed reader sees the record."""
    from confluent_kafka import Producer

    from tests.integration.txn_util import (
        describe_producers,
        describe_transactions,
        list_transactions,
        write_txn_marker,
    )

    topic, tid = secured.create_topic(), f"edge-tx-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": f"{secured.host}:{secured.plaintext}",
                         "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"precious")
    producer.flush(15)
    admin = secured.super_user()
    alice = secured.alice()
    try:
        assert wait_until(lambda: describe_transactions(admin, tid)[tid].topics, timeout=10)
        state = describe_transactions(admin, tid)[tid]
        assert tid not in {t.transactional_id for t in list_transactions(alice).transaction_states}
        assert describe_transactions(alice, tid)[tid].error_code == \
            ErrorCode.transactional_id_authorization_failed
        assert describe_producers(alice, (topic, 0)).error_code == \
            ErrorCode.topic_authorization_failed
        assert write_txn_marker(alice, (topic, 0), state.producer_id, state.producer_epoch,
                                commit=False, coordinator_epoch=0) == \
            ErrorCode.cluster_authorization_failed
        m = request_module(CREATE_ACLS, 3)
        r = secured.request(CREATE_ACLS, 3, build(m.CreateAclsRequest, creations=(build(
            m.AclCreation, resource_type=5, resource_name=tid, resource_pattern_type=LITERAL,
            principal="User:alice", host="*", operation=8, permission_type=ALLOW),)))  # DESCRIBE
        assert r.results[0].error_code == 0
        assert wait_until(lambda: describe_transactions(alice, tid)[tid].error_code == 0,
                          timeout=10)
        seen = describe_transactions(alice, tid)[tid]
        assert seen.transaction_state == "Ongoing" and seen.topics == ()
        assert tid in {t.transactional_id for t in list_transactions(alice).transaction_states}
    finally:
        alice.close()
        admin.close()
    producer.commit_transaction(30)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": f"{secured.host}:{secured.plaintext}",
                  "group.id": f"g-{tid}", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list = []
        assert wait_until(lambda: got.extend(
            m.value() for m in c.consume(10, 0.5) if m.error() is None) or got, timeout=20)
        assert got == [b"precious"]
    finally:
        c.close()
