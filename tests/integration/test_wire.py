"""Wire behaviour with raw requests: pipelining, Fetch long polls and limits, fetch
sessions, idle connections, and the idempotent producer's sequence checks."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.records import decode_records, iter_batches

from tests.helpers import wait_until
from tests.integration.wire_util import (
    API_VERSIONS,
    FETCH,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    api_versions_request,
    batch,
    connect,
    expect_closed,
    fetch_partition,
    fetch_request,
    frame,
    init_producer_id_request,
    log_end_offset,
    metadata_request,
    nothing_received,
    partition_response,
    produce_request,
    recv_response,
    wait_for_log,
)


@pytest.fixture(autouse=True)
def _info_logs(caplog):
    caplog.set_level(logging.INFO)


def _produce(txbroker, topic: str, partition: int, records: bytes, *, acks: int = -1):
    client = connect(txbroker)
    try:
        response = client.request(PRODUCE, 9, produce_request({topic: {partition: records}},
                                                              acks=acks))
    finally:
        client.close()
    return partition_response(response, topic, partition)


def _fetch(client, partitions, **kwargs):
    response = client.request(FETCH, 12, fetch_request(partitions, **kwargs))
    assert response is not None
    return response


def _batches(records: bytes) -> list:
    return [h for _, h in iter_batches(records)]


def _all_records(records: bytes) -> list:
    return [r for pos, _ in iter_batches(records) for r in decode_records(records, pos)]


def _no_errors_logged(caplog) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


# --- pipelining ------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(txbroker, caplog):
    txbroker.create_topic("pipe", 1)
    plan = []  # (api key, version, message)
    for i in range(20):
        kind = i % 5
        if kind == 0:
            plan.append((API_VERSIONS, 3 if i % 2 else 0, api_versions_request(3 if i % 2 else 0)))
        elif kind == 1:
            plan.append((METADATA, 12 if i % 2 else 1, metadata_request(["pipe"], 12 if i % 2 else 1)))
        elif kind == 2:
            plan.append((PRODUCE, 9 if i % 2 else 7, produce_request({"pipe": {0: batch(2)}},
                                                                     acks=1 if i % 2 else -1,
                                                                     version=9 if i % 2 else 7)))
        elif kind == 3:
            # Waits for data beyond what is there: holds up everything behind it.
            plan.append((FETCH, 12, fetch_request({"pipe": {0: 0}}, max_wait_ms=150,
                                                  min_bytes=10**6)))
        else:
            plan.append((FETCH, 11, fetch_request({"pipe": {0: 0}}, max_wait_ms=0, version=11)))
    client = connect(txbroker)
    client.send_frame(b"".join(frame(k, v, cid, m) for cid, (k, v, m) in enumerate(plan, 1)))
    produce_offsets = []
    for cid, (key, version, _) in enumerate(plan, 1):
        got = recv_response(client, key, version)
        assert got is not None, f"connection closed before response {cid}"
        got_cid, response = got
        assert got_cid == cid
        if key == PRODUCE:
            p = partition_response(response, "pipe", 0)
            assert p.error_code == ErrorCode.none
            produce_offsets.append(p.base_offset)
        elif key == FETCH:
            assert fetch_partition(response, "pipe", 0).error_code == ErrorCode.none
        elif key == API_VERSIONS:
            assert response.error_code == ErrorCode.none
    # Appends happen in the order the requests arrived.
    assert produce_offsets == [0, 2, 4, 6]
    assert log_end_offset(txbroker, "pipe") == 8
    client.close()
    _no_errors_logged(caplog)


def test_answers_finished_together_leave_in_one_write(txbroker, caplog):
    """Pipelined requests that finish together are answered with fewer socket writes
    than answers (one writev, not a send each), still in order."""
    client = connect(txbroker)
    client.send_frame(frame(API_VERSIONS, 3, 1, api_versions_request(3)))
    assert recv_response(client, API_VERSIONS, 3) is not None
    writes = []

    def count_writes(b):
        for conn in b._connections:
            write, writelines = conn.writer.write, conn.writer.writelines
            conn.writer.write = lambda data, w=write: (writes.append(1), w(data))
            conn.writer.writelines = lambda parts, w=writelines: (writes.append(len(parts)),
                                                                   w(parts))

    txbroker.call(count_writes)
    n = 10
    client.send_frame(b"".join(frame(API_VERSIONS, 3, cid, api_versions_request(3))
                               for cid in range(2, 2 + n)))
    for cid in range(2, 2 + n):
        got = recv_response(client, API_VERSIONS, 3)
        assert got is not None and got[0] == cid
    assert sum(writes) == n  # every answer written once
    assert len(writes) < n, writes
    client.close()
    _no_errors_logged(caplog)


def test_a_failing_write_of_an_answer_closes_the_connection(txbroker, caplog):
    """Answers are written from the finished request's done callback: a write that
    fails there closes that connection with an ERROR line (as the writer task did),
    instead of leaving the client waiting; the broker serves the next connection."""
    client = connect(txbroker)
    client.send_frame(frame(API_VERSIONS, 3, 1, api_versions_request(3)))
    assert recv_response(client, API_VERSIONS, 3) is not None

    def break_writes(b):
        for conn in b._connections:
            def failing_write(data):
                raise RuntimeError("the socket write failed")
            conn.writer.write = conn.writer.writelines = failing_write

    txbroker.call(break_writes)
    with caplog.at_level(logging.ERROR):
        client.send_frame(frame(API_VERSIONS, 3, 2, api_versions_request(3)))
        expect_closed(client)
        assert wait_until(lambda: any("answering" in r.getMessage() and "failed" in r.getMessage()
                                      for r in caplog.records if r.levelno == logging.ERROR),
                          timeout=5)
    other = connect(txbroker)
    other.send_frame(frame(API_VERSIONS, 3, 3, api_versions_request(3)))
    assert recv_response(other, API_VERSIONS, 3)[0] == 3
    other.close()


# --- Fetch: long poll ----------------------------------------------------------------------


def test_long_poll_waits_for_max_wait(txbroker):
    txbroker.create_topic("lp", 1)
    client = connect(txbroker)
    start = time.monotonic()
    response = _fetch(client, {"lp": {0: 0}}, max_wait_ms=300, min_bytes=1)
    elapsed = time.monotonic() - start
    part = fetch_partition(response, "lp", 0)
    assert part.error_code == ErrorCode.none
    assert not part.records
    assert 0.25 <= elapsed < 3.0, elapsed
    # min_bytes=0 (or data already there) answers at once, whatever max_wait says.
    start = time.monotonic()
    _fetch(client, {"lp": {0: 0}}, max_wait_ms=5000, min_bytes=0)
    assert time.monotonic() - start < 2.5
    client.close()


def test_long_poll_returns_when_data_arrives(txbroker):
    txbroker.create_topic("lp", 1)
    waiter = connect(txbroker)
    start = time.monotonic()
    waiter.send_frame(frame(FETCH, 12, 1, fetch_request({"lp": {0: 0}}, max_wait_ms=20_000)))
    assert nothing_received(waiter, 0.3), "the fetch must wait for data"
    assert _produce(txbroker, "lp", 0, batch(3)).error_code == ErrorCode.none
    cid, response = recv_response(waiter, FETCH, 12)
    elapsed = time.monotonic() - start
    assert cid == 1
    assert elapsed < 10, "the long poll did not return when data arrived"
    part = fetch_partition(response, "lp", 0)
    assert part.high_watermark == 3
    records = decode_records(part.records)
    assert [r.offset for r in records] == [0, 1, 2]
    assert records[0].key == b"k0"
    waiter.close()


def test_min_bytes_counts_across_partitions(txbroker):
    txbroker.create_topic("mb", 2)
    b = batch(1, value_size=50)
    waiter = connect(txbroker)
    waiter.send_frame(frame(FETCH, 12, 1, fetch_request({"mb": {0: 0, 1: 0}}, max_wait_ms=20_000,
                                                        min_bytes=len(b) + 1)))
    assert _produce(txbroker, "mb", 0, b).error_code == ErrorCode.none
    # One partition's batch is not enough.
    assert nothing_received(waiter, 0.4)
    assert _produce(txbroker, "mb", 1, b).error_code == ErrorCode.none
    cid, response = recv_response(waiter, FETCH, 12)
    assert cid == 1
    sizes = [len(fetch_partition(response, "mb", p).records) for p in (0, 1)]
    assert sizes == [len(b), len(b)]
    waiter.close()


def test_min_bytes_already_satisfied_answers_immediately(txbroker):
    txbroker.create_topic("mb", 2)
    b = batch(1, value_size=50)
    _produce(txbroker, "mb", 0, b)
    _produce(txbroker, "mb", 1, b)
    client = connect(txbroker)
    start = time.monotonic()
    response = _fetch(client, {"mb": {0: 0, 1: 0}}, max_wait_ms=10_000, min_bytes=2 * len(b))
    assert time.monotonic() - start < 5
    assert [len(fetch_partition(response, "mb", p).records) for p in (0, 1)] == [len(b)] * 2
    client.close()


# --- Fetch: size limits -------------------------------------------------------------------


@pytest.fixture
def three_batches_each(txbroker):
    """Topic "lim" with 2 partitions holding 3 equal batches (of size returned) each."""
    txbroker.create_topic("lim", 2)
    b = batch(2, value_size=60)
    for p in (0, 1):
        for _ in range(3):
            assert _produce(txbroker, "lim", p, b).error_code == ErrorCode.none
    return len(b)


def _fetched_batches(response, partition):
    part = fetch_partition(response, "lim", partition)
    assert part.error_code == ErrorCode.none
    headers = _batches(part.records)
    assert sum(h.size for h in headers) == len(part.records), "partial batch returned"
    return [h.base_offset for h in headers]


def test_partition_max_bytes_whole_batches(txbroker, three_batches_each):
    size = three_batches_each
    client = connect(txbroker)
    response = _fetch(client, {"lim": {0: 0, 1: 0}}, partition_max_bytes=2 * size + size // 2)
    assert _fetched_batches(response, 0) == [0, 2]
    assert _fetched_batches(response, 1) == [0, 2]
    response = _fetch(client, {"lim": {0: 2, 1: 0}}, partition_max_bytes=size)
    assert _fetched_batches(response, 0) == [2]  # a fetch offset inside a batch
    assert _fetched_batches(response, 1) == [0]
    client.close()


def test_max_bytes_across_partitions(txbroker, three_batches_each):
    size = three_batches_each
    client = connect(txbroker)
    response = _fetch(client, {"lim": {0: 0, 1: 0}}, max_bytes=2 * size + size // 2)
    assert _fetched_batches(response, 0) == [0, 2]
    assert _fetched_batches(response, 1) == []  # what is left is less than a batch
    response = _fetch(client, {"lim": {0: 0, 1: 0}}, max_bytes=4 * size)
    assert _fetched_batches(response, 0) == [0, 2, 4]
    assert _fetched_batches(response, 1) == [0]
    client.close()


def test_first_batch_returned_even_if_larger_than_limits(txbroker, three_batches_each):
    client = connect(txbroker)
    for kwargs in ({"max_bytes": 10}, {"partition_max_bytes": 10},
                   {"max_bytes": 10, "partition_max_bytes": 10}):
        response = _fetch(client, {"lim": {0: 0, 1: 0}}, **kwargs)
        assert _fetched_batches(response, 0) == [0], kwargs
        # Only the first partition with data gets the oversize allowance (as in Kafka).
        assert _fetched_batches(response, 1) == [], kwargs
    client.close()


# --- Fetch: offsets out of range ----------------------------------------------------------------


def test_offset_past_the_end_is_out_of_range(txbroker):
    txbroker.create_topic("oor", 1)
    _produce(txbroker, "oor", 0, batch(3))
    client = connect(txbroker)
    part = fetch_partition(_fetch(client, {"oor": {0: 4}}), "oor", 0)
    assert part.error_code == ErrorCode.offset_out_of_range
    assert part.high_watermark == 3 and part.log_start_offset == 0
    part = fetch_partition(_fetch(client, {"oor": {0: 10**12}}), "oor", 0)
    assert part.error_code == ErrorCode.offset_out_of_range
    # The log end itself is fine: nothing yet.
    part = fetch_partition(_fetch(client, {"oor": {0: 3}}), "oor", 0)
    assert part.error_code == ErrorCode.none and not part.records
    client.close()


def test_offset_below_log_start_is_out_of_range(txbroker, caplog):
    # Size retention only: these records are stamped 1970, and time retention would
    # take the active segment too (as Kafka's does), leaving no offset below the end.
    txbroker.create_topic("ret", 1, {"segment.bytes": "400", "retention.bytes": "1",
                                     "retention.ms": "-1"})
    for _ in range(8):
        assert _produce(txbroker, "ret", 0, batch(2, value_size=40)).error_code == ErrorCode.none
    deleted = txbroker.call(lambda b: b.logs.run_retention())
    assert deleted > 0
    start = txbroker.call(lambda b: b.logs.get_log("ret", 0).log_start_offset)
    assert 0 < start < 16
    wait_for_log(caplog, "retention deleted", "log start offset now")
    client = connect(txbroker)
    for offset in (0, start - 1, -1):
        part = fetch_partition(_fetch(client, {"ret": {0: offset}}), "ret", 0)
        assert part.error_code == ErrorCode.offset_out_of_range, offset
        assert part.log_start_offset == start
        assert part.high_watermark == 16
    part = fetch_partition(_fetch(client, {"ret": {0: start}}), "ret", 0)
    assert part.error_code == ErrorCode.none
    assert _batches(part.records)[0].base_offset == start
    client.close()


def test_fetch_unknown_topic_or_partition(txbroker):
    txbroker.create_topic("known", 1)
    client = connect(txbroker)
    response = _fetch(client, {"known": {0: 0, 5: 0}, "unknown": {0: 0}}, max_wait_ms=5000)
    assert fetch_partition(response, "known", 0).error_code == ErrorCode.none
    assert fetch_partition(response, "known", 5).error_code == ErrorCode.unknown_topic_or_partition
    assert fetch_partition(response, "unknown", 0).error_code == \
        ErrorCode.unknown_topic_or_partition
    client.close()


# --- Fetch: sessions -------------------------------------------------------------------------------


@pytest.mark.parametrize("session_id,epoch", [(0, -1), (0, 0), (123, 0), (123, -1)])
def test_full_fetch_without_a_session(txbroker, session_id, epoch):
    txbroker.create_topic("fs", 1)
    _produce(txbroker, "fs", 0, batch(2))
    client = connect(txbroker)
    response = _fetch(client, {"fs": {0: 0}}, session_id=session_id, session_epoch=epoch)
    assert response.error_code == ErrorCode.none
    assert response.session_id == 0  # the broker never creates a session (KIP-227 allows it)
    assert len(decode_records(fetch_partition(response, "fs", 0).records)) == 2
    client.close()


@pytest.mark.parametrize("session_id,epoch", [(123, 1), (123, 7), (0, 1)])
def test_incremental_fetch_session_not_found(txbroker, session_id, epoch):
    txbroker.create_topic("fs", 1)
    client = connect(txbroker)
    start = time.monotonic()
    response = _fetch(client, {"fs": {0: 0}}, session_id=session_id, session_epoch=epoch,
                      max_wait_ms=5000)
    assert time.monotonic() - start < 2.5, "a session error is answered without waiting"
    assert response.error_code == ErrorCode.fetch_session_id_not_found
    assert response.session_id == 0
    assert response.responses == ()
    # The client falls back to a full fetch on the same connection.
    assert _fetch(client, {"fs": {0: 0}}, session_epoch=0).error_code == ErrorCode.none
    client.close()


# --- connections -----------------------------------------------------------------------------------


@pytest.mark.parametrize("txbroker_config", [{"connections.max.idle.ms": "500"}])
def test_idle_connections_are_reaped_active_ones_are_not(txbroker, caplog):
    txbroker.create_topic("idle", 1)
    idle = connect(txbroker)
    active = connect(txbroker)
    polling = connect(txbroker)
    assert idle.request(API_VERSIONS, 3, api_versions_request()).error_code == ErrorCode.none
    last_use = time.monotonic()
    # A request in flight for longer than the idle time still gets its answer.
    polling.send_frame(frame(FETCH, 12, 1, fetch_request({"idle": {0: 0}}, max_wait_ms=1200)))
    assert nothing_received(idle, 0.3), "closed before connections.max.idle.ms"
    deadline = time.monotonic() + 1.6
    while time.monotonic() < deadline:
        response = active.request(API_VERSIONS, 3, api_versions_request())
        assert response is not None, "an active connection was closed"
        time.sleep(0.1)
    expect_closed(idle, timeout=3)
    assert time.monotonic() - last_use >= 0.45
    wait_for_log(caplog, "closing idle connection", "connections.max.idle.ms")
    got = recv_response(polling, FETCH, 12)
    assert got is not None and got[0] == 1, "an in-flight long poll lost its response"
    assert active.request(API_VERSIONS, 3, api_versions_request()).error_code == ErrorCode.none
    for c in (idle, active, polling):
        c.close()


def test_client_disconnecting_mid_long_poll_does_not_disturb_others(txbroker, caplog):
    txbroker.create_topic("dc", 1)
    quitter = connect(txbroker)
    other = connect(txbroker)
    quitter.send_frame(frame(FETCH, 12, 1, fetch_request({"dc": {0: 0}}, max_wait_ms=1500)))
    other.send_frame(frame(FETCH, 12, 1, fetch_request({"dc": {0: 0}}, max_wait_ms=10_000)))
    time.sleep(0.2)
    quitter.close()
    time.sleep(0.1)
    # Data arrives while the dead connection's fetch is still parked on the partition.
    assert _produce(txbroker, "dc", 0, batch(2)).error_code == ErrorCode.none
    cid, response = recv_response(other, FETCH, 12)
    assert cid == 1
    assert len(decode_records(fetch_partition(response, "dc", 0).records)) == 2
    # More traffic works, and the dead connection is cleaned up.
    assert _fetch(other, {"dc": {0: 2}}, max_wait_ms=0).error_code == ErrorCode.none
    assert wait_until(lambda: txbroker.call(lambda b: len(b._connections)) == 1, timeout=10)
    waiters = txbroker.call(lambda b: len(b.logs.get_log("dc", 0)._waiters))
    assert waiters == 0
    other.close()
    _no_errors_logged(caplog)


def test_many_concurrent_long_polls_all_released(txbroker):
    txbroker.create_topic("many", 1)
    clients = [connect(txbroker) for _ in range(10)]
    for c in clients:
        c.send_frame(frame(FETCH, 12, 9, fetch_request({"many": {0: 0}}, max_wait_ms=20_000)))
    time.sleep(0.2)
    assert _produce(txbroker, "many", 0, batch(1)).error_code == ErrorCode.none
    results = []

    def read(c):
        results.append(recv_response(c, FETCH, 12))

    threads = [threading.Thread(target=read, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 10
    assert all(r is not None and r[0] == 9 and fetch_partition(r[1], "many", 0).records
               for r in results)
    for c in clients:
        c.close()


# --- idempotent producer ------------------------------------------------------------------------------


def _init_pid(txbroker) -> tuple[int, int]:
    client = connect(txbroker)
    response = client.request(INIT_PRODUCER_ID, 4, init_producer_id_request())
    client.close()
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def _idem(pid, epoch, seq, n=2):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_init_producer_id_gives_distinct_ids(txbroker):
    ids = [_init_pid(txbroker) for _ in range(5)]
    assert len({pid for pid, _ in ids}) == 5
    assert all(pid >= 0 and epoch == 0 for pid, epoch in ids)
    # Older versions too.
    client = connect(txbroker)
    for version in (0, 1, 2, 3):
        response = client.request(INIT_PRODUCER_ID, version, init_producer_id_request(version))
        assert response.error_code == ErrorCode.none
        assert response.producer_id not in {pid for pid, _ in ids}
    client.close()


def test_retried_batch_answered_with_original_offset(txbroker, caplog):
    txbroker.create_topic("idem", 1)
    pid, epoch = _init_pid(txbroker)
    first = _idem(pid, epoch, 0)
    assert _produce(txbroker, "idem", 0, first).base_offset == 0
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 2)).base_offset == 2
    # A retry of the first batch (its response was lost): same offset, nothing appended.
    retry = _produce(txbroker, "idem", 0, first)
    assert retry.error_code == ErrorCode.none and retry.base_offset == 0
    assert log_end_offset(txbroker, "idem") == 4
    wait_for_log(caplog, "duplicate batch", f"producer {pid}", "original offset 0")
    # The sequence continues after the newest batch.
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 4)).base_offset == 4
    client = connect(txbroker)
    records = _all_records(fetch_partition(_fetch(client, {"idem": {0: 0}}), "idem", 0).records)
    client.close()
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 5]


def test_duplicates_of_the_last_five_batches_only(txbroker):
    txbroker.create_topic("idem", 1)
    pid, epoch = _init_pid(txbroker)
    sent = [_idem(pid, epoch, 2 * i) for i in range(7)]
    for i, b in enumerate(sent):
        assert _produce(txbroker, "idem", 0, b).base_offset == 2 * i
    for i in range(2, 7):
        assert _produce(txbroker, "idem", 0, sent[i]).base_offset == 2 * i
    # Older than the five cached batches: Kafka cannot tell, and answers out of order.
    assert _produce(txbroker, "idem", 0, sent[1]).error_code == \
        ErrorCode.out_of_order_sequence_number
    assert log_end_offset(txbroker, "idem") == 14


def test_sequence_gap_is_out_of_order(txbroker, caplog):
    txbroker.create_topic("idem", 1)
    pid, epoch = _init_pid(txbroker)
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 0)).error_code == ErrorCode.none
    result = _produce(txbroker, "idem", 0, _idem(pid, epoch, 5))
    assert result.error_code == ErrorCode.out_of_order_sequence_number
    assert result.base_offset == -1
    wait_for_log(caplog, "OUT_OF_ORDER_SEQUENCE_NUMBER", "expected sequence 2, got 5",
                 level=logging.WARNING)
    assert log_end_offset(txbroker, "idem") == 2
    # The right next sequence still works.
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 2)).base_offset == 2


def test_epochs(txbroker, caplog):
    txbroker.create_topic("idem", 1)
    pid, _ = _init_pid(txbroker)
    assert _produce(txbroker, "idem", 0, _idem(pid, 0, 0)).base_offset == 0
    assert _produce(txbroker, "idem", 0, _idem(pid, 0, 2)).base_offset == 2
    # A new epoch must start at sequence 0.
    bad = _produce(txbroker, "idem", 0, _idem(pid, 1, 4))
    assert bad.error_code == ErrorCode.out_of_order_sequence_number
    ok = _produce(txbroker, "idem", 0, _idem(pid, 1, 0))
    assert ok.error_code == ErrorCode.none and ok.base_offset == 4
    # The old epoch is fenced now.
    stale = _produce(txbroker, "idem", 0, _idem(pid, 0, 4))
    assert stale.error_code == ErrorCode.invalid_producer_epoch
    wait_for_log(caplog, "INVALID_PRODUCER_EPOCH", f"producer {pid} epoch 0", level=logging.WARNING)
    assert log_end_offset(txbroker, "idem") == 6
    # Producers are tracked per producer id: another one is unaffected.
    other, _ = _init_pid(txbroker)
    assert _produce(txbroker, "idem", 0, _idem(other, 0, 0)).base_offset == 6


def test_unknown_producer_may_start_at_any_sequence(txbroker):
    """Kafka accepts any sequence from a producer the partition has no state for
    (its state may have been removed by retention)."""
    txbroker.create_topic("idem", 1)
    pid, epoch = _init_pid(txbroker)
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 42)).base_offset == 0
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 44)).base_offset == 2
    assert _produce(txbroker, "idem", 0, _idem(pid, epoch, 47)).error_code == \
        ErrorCode.out_of_order_sequence_number


def test_idempotent_state_is_per_partition(txbroker):
    txbroker.create_topic("idem", 2)
    pid, epoch = _init_pid(txbroker)
    b = _idem(pid, epoch, 0)
    assert _produce(txbroker, "idem", 0, b).base_offset == 0
    # The same sequence on another partition is not a duplicate.
    assert _produce(txbroker, "idem", 1, b).base_offset == 0
    assert log_end_offset(txbroker, "idem", 1) == 2

