"""/metrics with real clients: transactions by outcome, LSO, group lag, request
histograms and errors, checked with prometheus_client's own parser."""

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture
def txbroker_config():
    return {"admin.http.port": "0", "transaction.abort.timed.out.transaction.cleanup.interval.ms":
            "100"}


def scrape(txbroker) -> dict:
    """family name -> list of (sample name, labels, value), parsed by prometheus_client."""
    port = txbroker.call(lambda b: b.admin_http.port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = (family.type, [(s.name, s.labels, s.value)
                                               for s in family.samples])
    return families


def value(families, family, name=None, **labels):
    kind, samples = families[family]
    name = name or family
    found = [v for n, lab, v in samples
             if n == name and all(lab.get(k) == str(v2) for k, v2 in labels.items())]
    assert len(found) == 1, (family, name, labels, samples)
    return found[0]


def scrape_until(txbroker, check, timeout=10.0) -> dict:
    """Scrape until ``check(families)`` holds: a transaction is counted once its markers
    are written, which follows the EndTxn answer."""
    deadline = time.monotonic() + timeout
    while True:
        families = scrape(txbroker)
        try:
            if check(families):
                return families
        except (AssertionError, KeyError):
            pass
        if time.monotonic() > deadline:
            return families
        time.sleep(0.05)


def outcome(families, name):
    return value(families, "txbroker_transactions", "txbroker_transactions_total",
                 outcome=name)


def txn_producer(txbroker, tid, **extra):
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": tid,
                  "metadata.recovery.strategy": "none", **extra})
    p.init_transactions(10)
    return p


def test_transactions_offsets_lag_and_requests(txbroker):
    txbroker.create_topic("m-topic", 1)
    committed = txn_producer(txbroker, "m-committed")
    committed.begin_transaction()
    for i in range(3):
        committed.produce("m-topic", value=b"c%d" % i, partition=0)
    committed.commit_transaction(10)
    committed.begin_transaction()
    committed.produce("m-topic", value=b"a", partition=0)
    committed.flush(10)  # else the abort is the client's alone (nothing was sent)
    committed.abort_transaction(10)

    # An open transaction holds the LSO back: 3 committed + COMMIT + 1 aborted + ABORT
    # = offset 6, then 2 open records.
    hanging = txn_producer(txbroker, "m-open", **{"transaction.timeout.ms": "60000"})
    hanging.begin_transaction()
    hanging.produce("m-topic", value=b"o1", partition=0)
    hanging.produce("m-topic", value=b"o2", partition=0)
    hanging.flush(10)

    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "m-group",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.commit(offsets=[TopicPartition("m-topic", 0, 2)], asynchronous=False)
    consumer.close()

    f = scrape_until(txbroker, lambda f: outcome(f, "aborted") == 1)
    assert f["txbroker_transactions"][0] == "counter"
    assert outcome(f, "committed") == 1
    assert outcome(f, "aborted") == 1
    assert value(f, "txbroker_transactions_ongoing") == 1
    assert value(f, "txbroker_transaction_oldest_age_seconds") >= 0
    assert value(f, "txbroker_partition_high_watermark", topic="m-topic", partition=0) == 8
    assert value(f, "txbroker_partition_last_stable_offset", topic="m-topic", partition=0) == 6
    assert value(f, "txbroker_partition_last_stable_offset_lag", topic="m-topic",
                 partition=0) == 2
    assert value(f, "txbroker_consumergroup_current_offset", group="m-group", topic="m-topic",
                 partition=0) == 2
    assert value(f, "txbroker_consumergroup_lag", group="m-group", topic="m-topic",
                 partition=0) == 6
    assert value(f, "txbroker_consumergroup_lag_read_committed", group="m-group",
                 topic="m-topic", partition=0) == 4

    # Request histograms per API and version: buckets cumulative, count = requests.
    kind, samples = f["txbroker_request_total_time_seconds"]
    assert kind == "histogram"
    end_txn = [(n, lab, v) for n, lab, v in samples if lab.get("api") == "end_txn"]
    assert end_txn, "EndTxn was sent"
    version = end_txn[0][1]["version"]
    count = value(f, "txbroker_request_total_time_seconds",
                  "txbroker_request_total_time_seconds_count", api="end_txn", version=version)
    assert count == value(f, "txbroker_requests", "txbroker_requests_total", api="end_txn",
                          version=version) == 2
    assert value(f, "txbroker_request_total_time_seconds",
                 "txbroker_request_total_time_seconds_bucket", api="end_txn", version=version,
                 le="+Inf") == count
    assert value(f, "txbroker_network_incoming_bytes", "txbroker_network_incoming_bytes_total",
                 api="produce") > 0
    assert value(f, "txbroker_network_outgoing_bytes", "txbroker_network_outgoing_bytes_total",
                 api="produce") > 0
    # acks=all produce and transaction state are fsynced: flush rounds were timed.
    assert value(f, "txbroker_log_flush_time_seconds",
                 "txbroker_log_flush_time_seconds_count") > 0

    # The hanging transaction times out: counted as timed_out, the LSO moves on.
    txbroker.expire_transactions("m-open")
    f = scrape_until(txbroker, lambda f: outcome(f, "timed_out") == 1)
    assert outcome(f, "timed_out") == 1
    assert value(f, "txbroker_transactions_ongoing") == 0
    assert value(f, "txbroker_partition_last_stable_offset_lag", topic="m-topic",
                 partition=0) == 0


def test_fenced_transactions_and_error_counts(txbroker):
    txbroker.create_topic("f-topic", 1)
    zombie = txn_producer(txbroker, "f-id")
    zombie.begin_transaction()
    zombie.produce("f-topic", value=b"z", partition=0)
    zombie.flush(10)
    # A new instance of the same transactional.id fences the first and aborts its
    # transaction.
    successor = txn_producer(txbroker, "f-id")
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    f = scrape_until(txbroker, lambda f: outcome(f, "fenced") == 1)
    assert outcome(f, "fenced") == 1
    _, errors = f["txbroker_request_errors"]
    names = {(lab["api"], lab["error"]) for _, lab, _ in errors}
    # The successor's first InitProducerId is told to retry while the abort completes;
    # the zombie's EndTxn is fenced.
    assert ("init_producer_id", "CONCURRENT_TRANSACTIONS") in names, names
    assert any(api == "end_txn" and err in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
               for api, err in names), names
    successor.begin_transaction()
    successor.produce("f-topic", value=b"s", partition=0)
    successor.commit_transaction(10)


def test_produce_errors_are_counted_from_the_fast_path(txbroker):
    """Produce answers are encoded by hand (protocol/fast_responses.py): the handler
    reports its error codes itself."""
    txbroker.create_topic("e-topic", 1, {"max.message.bytes": "2000"})
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "acks": "all",
                  "message.max.bytes": "100000", "retries": 0})
    failures = []
    p.produce("e-topic", value=b"x" * 10_000, partition=0,
              on_delivery=lambda err, msg: failures.append(err))
    p.produce("e-topic", value=b"ok", partition=0)
    assert p.flush(10) == 0
    assert failures and failures[0] is not None
    f = scrape(txbroker)
    assert value(f, "txbroker_request_errors", "txbroker_request_errors_total", api="produce",
                 error="MESSAGE_TOO_LARGE") == 1


def test_groups_and_rebalances_by_protocol(txbroker):
    """A classic member and a consumer-protocol (KIP-848) member: groups are counted by
    protocol and state, rebalances by protocol."""
    from .consumer_util import owned, poll_until

    txbroker.create_topic("m-groups", 2)

    def groups(f, protocol, state):
        return value(f, "txbroker_groups", protocol=protocol, state=state)

    def rebalances(f, protocol):
        return value(f, "txbroker_group_rebalances", "txbroker_group_rebalances_total",
                     protocol=protocol)

    before = scrape(txbroker)
    assert groups(before, "consumer", "Assigning") == 0  # every state has its series
    base = {(p, s): groups(before, p, s) for p, s in (("classic", "Stable"),
                                                       ("consumer", "Stable"),
                                                       ("consumer", "Empty"))}
    conf = {"bootstrap.servers": txbroker.bootstrap, "enable.auto.commit": False}
    classic = Consumer({**conf, "group.id": "m-classic", "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 200})
    modern = Consumer({**conf, "group.id": "m-consumer", "group.protocol": "consumer"})
    try:
        classic.subscribe(["m-groups"])
        modern.subscribe(["m-groups"])
        assert poll_until([classic, modern],
                          lambda: owned(classic) == {0, 1} == owned(modern), timeout=60)
        f = scrape_until(txbroker, lambda f: groups(f, "consumer", "Stable")
                         == base["consumer", "Stable"] + 1
                         and groups(f, "classic", "Stable") == base["classic", "Stable"] + 1)
        assert groups(f, "classic", "Stable") == base["classic", "Stable"] + 1
        assert groups(f, "consumer", "Stable") == base["consumer", "Stable"] + 1
        assert rebalances(f, "classic") >= rebalances(before, "classic") + 1
        assert rebalances(f, "consumer") >= rebalances(before, "consumer") + 1
    finally:
        classic.close()
        modern.close()
    # The consumer-protocol member left (epoch -1): its group is Empty.
    f = scrape(txbroker)
    assert groups(f, "consumer", "Empty") == base["consumer", "Empty"] + 1
    assert groups(f, "consumer", "Stable") == base["consumer", "Stable"]


def test_event_loop_tasks_follow_the_connections(txbroker):
    """txbroker_event_loop_tasks (what `make soak` watches for leaks): a connection's
    task is counted while it is open and gone once it is closed."""
    import socket

    def tasks_and_connections(families):
        return (value(families, "txbroker_event_loop_tasks"),
                value(families, "txbroker_connections"))

    before, conns_before = tasks_and_connections(scrape(txbroker))
    assert before >= 1
    socks = [socket.create_connection((txbroker.host, txbroker.port), 10) for _ in range(3)]
    try:
        opened = scrape_until(txbroker, lambda f: tasks_and_connections(f)[1] == conns_before + 3)
        assert tasks_and_connections(opened)[0] >= before + 3
    finally:
        for s in socks:
            s.close()
    closed = scrape_until(txbroker, lambda f: tasks_and_connections(f)[0] <= before)
    tasks, conns = tasks_and_connections(closed)
    assert tasks <= before and conns == conns_before


SHARE_ON = {"admin.http.port": "0", "txbroker.share.version": "1",
            "txbroker.share.auto.offset.reset": "earliest",
            "group.share.record.lock.duration.ms": "1000"}


def share_counter(f, field, **labels):
    family = f"txbroker_share_{field}"
    return value(f, family, f"{family}_total", **labels)


@pytest.mark.parametrize("txbroker_config", [SHARE_ON])
def test_share_group_acquisitions_acknowledgements_and_lock_expiries(txbroker):
    """A real ShareConsumer: records acquired, acknowledged by type, redelivered and left
    until their locks expire are counted; groups, members and in-flight records gauged."""
    from .test_share_groups import ck, poll_until, share_consumer

    if not hasattr(ck, "ShareConsumer"):
        pytest.skip("confluent-kafka without ShareConsumer")
    txbroker.create_topic("m-share")
    p = Producer({"bootstrap.servers": txbroker.bootstrap})
    for i in range(6):
        p.produce("m-share", value=b"s%d" % i)
    assert p.flush(10) == 0
    c = share_consumer(txbroker.bootstrap, "m-share-group", "m-share", explicit=True)
    try:
        first = sorted(poll_until(c, 6), key=lambda m: m.offset())
        assert [m.offset() for m in first] == list(range(6))
        kinds = [ck.AcknowledgeType.ACCEPT] * 2 + [ck.AcknowledgeType.REJECT] \
            + [ck.AcknowledgeType.RELEASE] * 3
        for m, kind in zip(first, kinds, strict=True):
            c.acknowledge(m, kind)
        c.commit_sync(10)
        again = poll_until(c, 3)  # the released three, delivery count 2; never acknowledged
        assert sorted(m.offset() for m in again) == [3, 4, 5]
        f = scrape_until(txbroker, lambda f: share_counter(f, "lock_expired_records") == 3)
        assert share_counter(f, "lock_expired_records") == 3
        assert share_counter(f, "acquired_records") == 9
        assert share_counter(f, "redelivered_records") == 3
        assert share_counter(f, "acknowledged_records", type="accept") == 2
        assert share_counter(f, "acknowledged_records", type="reject") == 1
        assert share_counter(f, "acknowledged_records", type="release") == 3
        assert share_counter(f, "acknowledged_records", type="renew") == 0
        assert share_counter(f, "dlq_records") == 0
        assert value(f, "txbroker_share_groups", state="Stable") == 1
        assert value(f, "txbroker_share_group_members") == 1
        # The window runs from the first unacknowledged record (3) to the end (6).
        assert value(f, "txbroker_share_inflight_records") == 3
    finally:
        c.close()


def test_share_metrics_are_absent_while_share_groups_are_off(txbroker):
    f = scrape(txbroker)
    assert not [name for name in f if name.startswith("txbroker_share_")]
    assert "txbroker_groups" in f  # (the page itself was served)


@pytest.mark.parametrize("txbroker_config", [{
    "admin.http.port": "0", "txbroker.share.version": "2",
    "txbroker.share.auto.offset.reset": "earliest"}])
def test_share_dead_letter_records_are_counted(txbroker):
    """A REJECTed record of a group with a dead-letter topic (KIP-1191) is counted once
    its dead-letter record is written."""
    from .test_share_dead_letter import dead_letter_group, produce_keyed
    from .test_share_groups import ck, poll_until, share_consumer

    dead_letter_group(txbroker, "m-dlq-group")
    produce_keyed(txbroker.bootstrap, 2)
    c = share_consumer(txbroker.bootstrap, "m-dlq-group", "t", explicit=True)
    try:
        got = sorted(poll_until(c, 2), key=lambda m: m.offset())
        assert [m.offset() for m in got] == [0, 1]
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.acknowledge(got[1], ck.AcknowledgeType.ACCEPT)
        c.commit_sync(10)
        f = scrape_until(txbroker, lambda f: share_counter(f, "dlq_records") == 1)
        assert share_counter(f, "dlq_records") == 1
        assert share_counter(f, "acknowledged_records", type="reject") == 1
    finally:
        c.close()
