"""Helpers for wire-level tests: build requests with kio, inspect the broker's logs and state."""

from __future__ import annotations

import datetime
import logging
import socket
import struct
from collections.abc import Mapping

from txbroker.protocol.messages import build, decode_response, encode_request, request_module
from txbroker.protocol.records import Record, build_batch

from tests.helpers import RawClient, wait_until

PRODUCE = 0
FETCH = 1
METADATA = 3
API_VERSIONS = 18
INIT_PRODUCER_ID = 22

BROKER_LOGGERS = ("txbroker",)


def connect(txbroker, timeout: float = 10) -> RawClient:
    return RawClient(txbroker.host, txbroker.port, timeout=timeout)


def batch(n: int = 1, *, value_size: int = 10, **kwargs) -> bytes:
    """A valid magic-2 batch of ``n`` records."""
    records = [Record(f"k{i}".encode(), bytes([65 + i % 26]) * value_size) for i in range(n)]
    return build_batch(records, **kwargs)


def produce_request(data: Mapping[str, Mapping[int, bytes | None]], *, acks: int = -1,
                    version: int = 9, transactional_id: str | None = None,
                    timeout_ms: int = 10_000):
    m = request_module(PRODUCE, version)
    topics = tuple(
        m.TopicProduceData(name=topic, partition_data=tuple(
            m.PartitionProduceData(index=p, records=records) for p, records in parts.items()))
        for topic, parts in data.items()
    )
    return m.ProduceRequest(transactional_id=transactional_id, acks=acks,
                            timeout=datetime.timedelta(milliseconds=timeout_ms),
                            topic_data=topics)


def fetch_request(partitions: Mapping[str, Mapping[int, int]], *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 2**31 - 1,
                  partition_max_bytes: int = 1 << 20, session_id: int = 0,
                  session_epoch: int = -1, version: int = 12, isolation_level: int = 0):
    """``partitions``: topic -> {partition: fetch offset}."""
    m = request_module(FETCH, version)
    topics = tuple(
        m.FetchTopic(topic=topic, partitions=tuple(
            build(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=offset,
                  last_fetched_epoch=-1, log_start_offset=-1,
                  partition_max_bytes=partition_max_bytes)
            for p, offset in parts.items()))
        for topic, parts in partitions.items()
    )
    return build(m.FetchRequest, replica_id=-1,
                 max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                 min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation_level,
                 session_id=session_id, session_epoch=session_epoch, topics=topics,
                 forgotten_topics_data=(), rack_id="")


def api_versions_request(version: int = 3, name: str = "txbroker-tests", sw_version: str = "1.0"):
    m = request_module(API_VERSIONS, version)
    return build(m.ApiVersionsRequest, client_software_name=name,
                 client_software_version=sw_version)


def metadata_request(topics: list[str] | None, version: int = 12):
    m = request_module(METADATA, version)
    items = None if topics is None else tuple(build(m.MetadataRequestTopic, name=t, topic_id=None)
                                              for t in topics)
    return build(m.MetadataRequest, topics=items, allow_auto_topic_creation=False,
                 include_topic_authorized_operations=False,
                 include_cluster_authorized_operations=False)


def init_producer_id_request(version: int = 4, producer_id: int = -1, producer_epoch: int = -1):
    m = request_module(INIT_PRODUCER_ID, version)
    return build(m.InitProducerIdRequest, transactional_id=None,
                 transaction_timeout=datetime.timedelta(seconds=60), producer_id=producer_id,
                 producer_epoch=producer_epoch)


def frame(api_key: int, version: int, correlation_id: int, message, client_id: str | None = "raw"
          ) -> bytes:
    return encode_request(api_key, version, correlation_id, client_id, message)


def raw_header(api_key: int, version: int, correlation_id: int, client_id: bytes | None = b"raw"
               ) -> bytes:
    """A non-flexible request header (v1) for requests kio has no schema for."""
    head = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        return head + struct.pack(">h", -1)
    return head + struct.pack(">h", len(client_id)) + client_id


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def recv_response(client: RawClient, api_key: int, version: int):
    """(correlation id, message) of the next response, or None if the broker closed."""
    body = client.recv_frame()
    if body is None:
        return None
    return decode_response(api_key, version, body)


def partition_response(produce_response, topic: str, partition: int):
    for t in produce_response.responses:
        if t.name == topic:
            for p in t.partition_responses:
                if p.index == partition:
                    return p
    raise AssertionError(f"no response for {topic}-{partition}")


def fetch_partition(fetch_response, topic: str, partition: int):
    for t in fetch_response.responses:
        if t.topic == topic:
            for p in t.partitions:
                if p.partition_index == partition:
                    return p
    raise AssertionError(f"no fetch data for {topic}-{partition}")


def log_end_offset(txbroker, topic: str, partition: int = 0) -> int:
    return txbroker.call(lambda b: b.logs.get_log(topic, partition).log_end_offset)


def assert_serving(txbroker) -> None:
    """A fresh connection gets an ApiVersions answer: the broker still serves clients."""
    client = connect(txbroker)
    try:
        response = client.request(API_VERSIONS, 3, api_versions_request())
        assert response is not None, "broker closed a healthy connection"
        assert response.error_code == 0
    finally:
        client.close()


def broker_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name.split(".")[0] in BROKER_LOGGERS]


def wait_for_log(caplog, *needles: str, level: int = logging.INFO, timeout: float = 5
                 ) -> logging.LogRecord:
    """The first broker log record at ``level`` or above containing every needle."""
    found: list[logging.LogRecord] = []

    def check() -> bool:
        for r in broker_records(caplog):
            msg = r.getMessage()
            if r.levelno >= level and all(n.lower() in msg.lower() for n in needles):
                found.append(r)
                return True
        return False

    if not wait_until(check, timeout=timeout):
        lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}"
                          for r in broker_records(caplog))
        raise AssertionError(f"no broker log line with {needles!r}; broker logged:\n{lines}")
    return found[0]


def expect_closed(client: RawClient, timeout: float = 5) -> None:
    """The broker closed the connection (EOF or reset) without sending anything."""
    client.sock.settimeout(timeout)
    try:
        data = client.sock.recv(1)
    except (ConnectionResetError, BrokenPipeError):
        return
    except TimeoutError:
        raise AssertionError("the broker did not close the connection") from None
    assert data == b"", f"expected a closed connection, got data {data!r}"


def nothing_received(client: RawClient, wait: float) -> bool:
    """True if nothing arrives on the socket within ``wait`` seconds (and it stays open)."""
    client.sock.settimeout(wait)
    try:
        client.sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return True
    return False

