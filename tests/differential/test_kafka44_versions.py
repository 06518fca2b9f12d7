"""The API versions raised to Apache Kafka 4.4's (issue 38): the same raw requests to
txbroker and to Kafka, comparing the fields each new version adds.

Metadata v13 (top-level error code), JoinGroup v8 (reason) and v9 (skip_assignment for
a returning static leader), DescribeGroups v6 (GROUP_ID_NOT_FOUND with a message,
KIP-1043), InitProducerId v5, DescribeLogDirs v5 (is_cordoned) and ListTransactions v2
(transactional-id pattern, KIP-1152).
"""

from __future__ import annotations

import datetime
import time

import pytest
from txbroker.protocol.messages import build, request_module

from tests.differential.util import RETRIABLE_INIT, init_txn
from tests.integration.txn_util import RawTxn, unique

METADATA = 3
JOIN_GROUP = 11
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
INIT_PRODUCER_ID = 22
DESCRIBE_LOG_DIRS = 35
LIST_TRANSACTIONS = 66

GROUP_ID_NOT_FOUND = 69
INVALID_REGULAR_EXPRESSION = 128
RETRIABLE_GROUP = {14, 15, 16}  # coordinator loading / not available / not coordinator


def _request(broker, api_key: int, version: int, cls_name: str, **fields):
    m = request_module(api_key, version)
    client = broker.raw()
    try:
        return client.request(api_key, version, build(getattr(m, cls_name), **fields))
    finally:
        client.close()


# --- Metadata v13 -------------------------------------------------------------------------

@pytest.mark.kafka_ci
def test_metadata_v13_top_level_error_code(broker):
    """v13's top-level error code is 0 on both brokers, for a known topic and beside a
    topic-level UNKNOWN_TOPIC_OR_PARTITION."""
    topic = broker.topic("md13")
    m = request_module(METADATA, 13)
    missing = unique("md13-missing")
    r = _request(broker, METADATA, 13, "MetadataRequest",
                 topics=tuple(build(m.MetadataRequestTopic, name=t, topic_id=None)
                              for t in (topic, missing)),
                 allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    assert int(r.error_code) == 0
    got = {t.name: (int(t.error_code), len(t.partitions)) for t in r.topics}
    assert got == {topic: (0, 1), missing: (3, 0)}
    assert len(r.brokers) == 1


# --- JoinGroup v8/v9, DescribeGroups v6 -----------------------------------------------------

def _join(broker, version: int, group: str, *, member_id: str = "", instance: str | None,
          reason: str | None = None, timeout: float = 30):
    """JoinGroup retried while the coordinator is not ready (Kafka creates
    __consumer_offsets on the first lookup)."""
    m = request_module(JOIN_GROUP, version)
    broker.wait_coordinator(group, key_type=0)
    deadline = time.monotonic() + timeout
    while True:
        r = _request(broker, JOIN_GROUP, version, "JoinGroupRequest", group_id=group,
                     session_timeout=datetime.timedelta(seconds=10),
                     rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id,
                     group_instance_id=instance, protocol_type="consumer",
                     protocols=(build(m.JoinGroupRequestProtocol, name="range",
                                      metadata=b"\x00\x01meta"),), reason=reason)
        if int(r.error_code) not in RETRIABLE_GROUP or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def _sync(broker, group: str, generation: int, member_id: str, instance: str | None,
          assignment: bytes):
    m = request_module(SYNC_GROUP, 5)
    return _request(broker, SYNC_GROUP, 5, "SyncGroupRequest", group_id=group,
                    generation_id=generation, member_id=member_id,
                    group_instance_id=instance, protocol_type="consumer",
                    protocol_name="range", assignments=(build(
                        m.SyncGroupRequestAssignment, member_id=member_id,
                        assignment=assignment),))


def _describe_v6(broker, *groups: str):
    return _request(broker, DESCRIBE_GROUPS, 6, "DescribeGroupsRequest", groups=groups,
                    include_authorized_operations=False).groups


@pytest.mark.kafka_ci
@pytest.mark.parametrize("version", [7, 8, 9])
def test_static_leader_rejoin_skip_assignment(broker, version):
    """A static member leads a Stable group; it restarts (JoinGroup with no member id,
    same instance id). From v9 it is told it leads, with the members, and to skip the
    assignment (KIP-814); before v9 the leader field names the old member id and no
    members are given. Either way the group stays Stable at its generation, and its
    assignment is kept. v8/v9 carry a join reason (KIP-800), which changes nothing."""
    group = unique(f"skip{version}")
    reason = None if version < 8 else "rejoining after a restart"
    first = _join(broker, version, group, instance="i1", reason=reason)
    assert int(first.error_code) == 0, first
    assert first.leader == first.member_id and len(first.members) == 1
    if version >= 9:
        assert first.skip_assignment is False
    synced = _sync(broker, group, first.generation_id, first.member_id, "i1", b"assigned")
    assert int(synced.error_code) == 0 and bytes(synced.assignment) == b"assigned"

    again = _join(broker, version, group, instance="i1", reason=reason)
    assert int(again.error_code) == 0, again
    assert again.generation_id == first.generation_id
    assert again.member_id != first.member_id
    assert (again.protocol_type, again.protocol_name) == ("consumer", "range")
    if version >= 9:
        assert again.skip_assignment is True
        assert again.leader == again.member_id
        assert [(x.member_id, x.group_instance_id, bytes(x.metadata)) for x in again.members] \
            == [(again.member_id, "i1", b"\x00\x01meta")]
    else:
        assert again.leader == first.member_id and list(again.members) == []
    # The group kept its assignment: the new member id syncs to it.
    synced = _sync(broker, group, again.generation_id, again.member_id, "i1", b"ignored")
    assert int(synced.error_code) == 0 and bytes(synced.assignment) == b"assigned"
    (d,) = _describe_v6(broker, group)
    assert (int(d.error_code), d.error_message, d.group_state, d.protocol_type,
            d.protocol_data) == (0, None, "Stable", "consumer", "range")
    assert [(x.member_id, x.group_instance_id) for x in d.members] == [(again.member_id, "i1")]


@pytest.mark.kafka_ci
def test_describe_groups_v6_unknown_group(broker):
    """v6 (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND, state Dead, with Kafka's
    message; v5 still answers it as Dead with no error."""
    group = unique("nogroup")
    broker.wait_coordinator(group, key_type=0)
    (d,) = _describe_v6(broker, group)
    assert (int(d.error_code), d.error_message, d.group_id, d.group_state, d.protocol_type,
            d.protocol_data, list(d.members), d.authorized_operations) == (
        GROUP_ID_NOT_FOUND, f"Group {group} not found.", group, "Dead", "", "", [],
        -2147483648)
    r5 = _request(broker, DESCRIBE_GROUPS, 5, "DescribeGroupsRequest", groups=(group,),
                  include_authorized_operations=False)
    (d5,) = r5.groups
    assert (int(d5.error_code), d5.group_state) == (0, "Dead")


@pytest.mark.kafka_ci
def test_describe_groups_v6_consumer_protocol_group(broker):
    """A KIP-848 consumer group is not a classic group: v6 says so with
    GROUP_ID_NOT_FOUND (v5: Dead, no error)."""
    from confluent_kafka import Consumer

    from tests.integration.consumer_util import owned, poll_until

    topic = broker.topic("dg6-cp")
    group = topic + "-g"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "group.protocol": "consumer"})
    try:
        c.subscribe([topic])
        assert poll_until([c], lambda: owned(c) == {0})
        (d,) = _describe_v6(broker, group)
        assert (int(d.error_code), d.error_message, d.group_state, list(d.members)) == (
            GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.", "Dead", [])
    finally:
        c.close()


# --- InitProducerId v5 ----------------------------------------------------------------------

@pytest.mark.kafka_ci
def test_init_producer_id_v5(broker):
    """v5 answers as v4: an idempotent producer gets a new id at epoch 0; a transactional
    id is bumped by each InitProducerId."""
    deadline = time.monotonic() + 30
    while True:  # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until it has a block of ids
        r = _request(broker, INIT_PRODUCER_ID, 5, "InitProducerIdRequest",
                     transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60))
        if int(r.error_code) not in RETRIABLE_INIT or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert int(r.error_code) == 0 and r.producer_id >= 0 and r.producer_epoch == 0
    tid = unique("ipid5")
    broker.wait_coordinator(tid)
    client = broker.raw()
    try:
        txn = RawTxn(client, tid)
        first = init_txn(txn, version=5)
        assert int(first.error_code) == 0 and first.producer_epoch == 0
        second = init_txn(txn, version=5)
        assert int(second.error_code) == 0
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    finally:
        client.close()


# --- DescribeLogDirs v5 ---------------------------------------------------------------------

@pytest.mark.kafka_ci
def test_describe_log_dirs_v5_not_cordoned(broker):
    topic = broker.topic("dld5", partitions=2)
    m = request_module(DESCRIBE_LOG_DIRS, 5)
    r = _request(broker, DESCRIBE_LOG_DIRS, 5, "DescribeLogDirsRequest", topics=(
        build(m.DescribableLogDirTopic, topic=topic, partitions=(0, 1, 7)),))
    assert int(r.error_code) == 0
    (result,) = r.results
    assert int(result.error_code) == 0 and result.is_cordoned is False
    assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    [(name, parts)] = [(t.name, sorted(p.partition_index for p in t.partitions))
                       for t in result.topics]
    assert (name, parts) == (topic, [0, 1])


# --- ListTransactions v2 --------------------------------------------------------------------

def _list_v2(broker, pattern: str | None, states=()):
    return _request(broker, LIST_TRANSACTIONS, 2, "ListTransactionsRequest",
                    state_filters=tuple(states), producer_id_filters=(), duration_filter=-1,
                    transactional_id_pattern=pattern)


@pytest.mark.kafka_ci
def test_list_transactions_v2_pattern(broker):
    """KIP-1152: the pattern must match the whole transactional id (RE2/J ``matches()``);
    null or empty lists all; RE2 syntax errors, backreferences and lookaround are
    INVALID_REGULAR_EXPRESSION for the whole request."""
    prefix = unique("ltp")
    tids = [f"{prefix}-alpha-1", f"{prefix}-alpha-2", f"{prefix}-beta"]
    client = broker.raw()
    try:
        for tid in tids:
            broker.wait_coordinator(tid)
            assert int(init_txn(RawTxn(client, tid)).error_code) == 0
    finally:
        client.close()

    def listed(pattern):
        r = _list_v2(broker, pattern)
        assert int(r.error_code) == 0, (pattern, r)
        return sorted(t.transactional_id for t in r.transaction_states
                      if t.transactional_id.startswith(prefix))

    assert listed(None) == tids
    assert listed("") == tids
    assert listed(prefix + ".*") == tids
    assert listed(prefix + r"-alpha-\d") == tids[:2]
    assert listed(f"(?i){prefix.upper()}-BETA") == [tids[2]]
    assert listed(prefix) == []  # a prefix is not a full match
    assert listed("alpha") == []
    assert listed(f"{prefix}-(alpha|beta).*") == tids
    for bad in ("(", "a**", r"(a)\1", "(?=a)a", "[z-a]"):
        r = _list_v2(broker, bad, states=("Ongoing", "NoSuchState"))
        assert int(r.error_code) == INVALID_REGULAR_EXPRESSION, bad
        assert (list(r.unknown_state_filters), list(r.transaction_states)) == ([], []), bad
