"""Wire-level checks of the versions raised to Kafka 4.4's (issue 38 item 5) that only
txbroker can show: what is advertised and what is deliberately not, the JoinGroup
reason in the log, and a ListTransactions pattern from a hostile client. The answers
themselves are compared with Kafka in tests/differential/test_kafka44_versions.py."""

from __future__ import annotations

import datetime
import logging
import time

import pytest
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module

from tests.integration.txn_util import RawTxn, list_transactions, unique
from tests.integration.wire_util import (
    API_VERSIONS,
    METADATA,
    api_versions_request,
    connect,
    metadata_request,
    wait_for_log,
)

JOIN_GROUP = 11
LIST_TRANSACTIONS = 66


@pytest.fixture(autouse=True)
def _info_logs(caplog):
    caplog.set_level(logging.INFO)


def test_advertised_versions_after_kafka_44(txbroker):
    """Raised: Metadata 13, JoinGroup 9, DescribeGroups 6, InitProducerId 5, DescribeLogDirs
    5, ListTransactions 2. Not raised (docs/compatibility.md, "Apache Kafka 4.4"): Fetch
    (13+ names topics by id), ListOffsets (v8+ special timestamps), DeleteGroups 3,
    TxnOffsetCommit 6 and ApiVersions 5 (kio 0.6.5 has no schema for them)."""
    client = connect(txbroker)
    try:
        r = client.request(API_VERSIONS, 3, api_versions_request(3))
    finally:
        client.close()
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
    assert {k: ranges[k] for k in (3, 11, 15, 22, 35, 66)} == {
        3: (0, 13), 11: (0, 9), 15: (0, 6), 22: (0, 5), 35: (1, 5), 66: (0, 2)}
    assert {k: ranges[k] for k in (1, 2, 18, 28, 42)} == {
        1: (4, 12), 2: (1, 7), 18: (0, 4), 28: (0, 5), 42: (0, 2)}


def test_metadata_v13_answers_error_code_none(txbroker):
    client = connect(txbroker)
    try:
        r = client.request(METADATA, 13, metadata_request(None, version=13))
    finally:
        client.close()
    assert r.error_code == ErrorCode.none and len(r.brokers) == 1


def test_join_group_reason_is_logged(txbroker, caplog):
    m = request_module(JOIN_GROUP, 8)
    group = unique("reason")
    client = connect(txbroker)
    try:
        r = client.request(JOIN_GROUP, 8, build(
            m.JoinGroupRequest, group_id=group, session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
            group_instance_id=None, protocol_type="consumer",
            protocols=(build(m.JoinGroupRequestProtocol, name="range", metadata=b""),),
            reason="need to re-join with the given member-id\nforged line"))
    finally:
        client.close()
    assert r.error_code == ErrorCode.member_id_required  # v4+: the first join of a member
    line = wait_for_log(caplog, group, "need to re-join").getMessage()
    assert "\n" not in line  # the reason is quoted, so a client cannot forge log lines


def _list_v2(client, pattern: str | None):
    m = request_module(LIST_TRANSACTIONS, 2)
    return client.request(LIST_TRANSACTIONS, 2, build(
        m.ListTransactionsRequest, state_filters=(), producer_id_filters=(),
        duration_filter=-1, transactional_id_pattern=pattern))


def test_list_transactions_pattern_from_a_hostile_client(txbroker):
    """A pattern that makes a backtracking engine take exponential time against a long
    transactional id is answered at once (the engine is linear); a pattern too large to
    compile is INVALID_REGULAR_EXPRESSION; v1 has no pattern and lists everything."""
    long_tid = "a" * 5000
    client = connect(txbroker)
    try:
        for tid in (long_tid, unique("plain")):
            assert RawTxn(client, tid).init().error_code == ErrorCode.none
        start = time.monotonic()
        r = _list_v2(client, "(a+)+b")
        assert r.error_code == ErrorCode.none and list(r.transaction_states) == []
        r = _list_v2(client, "(a|aa)*")
        assert [t.transactional_id for t in r.transaction_states] == [long_tid]
        assert time.monotonic() - start < 5
        r = _list_v2(client, "(" * 6000 + ")" * 6000)
        assert r.error_code == ErrorCode.invalid_regular_expression
        assert list(r.transaction_states) == []
        assert len(list_transactions(client, version=1).transaction_states) == 2
    finally:
        client.close()
