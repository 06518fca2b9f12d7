"""What the checker needs from a broker, read over the Kafka protocol (so it works on
any broker, txbroker or Kafka): a topic's whole log as written, aborted records
included, each with its transaction's outcome as read_committed consumers decide it
(the markers in the log, not the reader under test).
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
from typing import Any

from kio.schema.describe_share_group_offsets.v0 import request as share_offsets
from kio.schema.fetch.v4 import request as fetch
from kio.schema.metadata.v5 import request as metadata
from txbroker.protocol.messages import decode_response, encode_request
from txbroker.protocol.records import (
    ControlType,
    Record,
    decode_records,
    iter_batches,
    read_control_type,
)

from .checker import OPEN, LogRecord, transaction_outcomes
from .mapping import ChaosRecord, IdOf, key_id

READ_UNCOMMITTED = 0
FETCH_BYTES = 4 << 20


class _Wire:
    """One connection, one request at a time."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout)
        self.stream = self.sock.makefile("rb")  # read(n): n bytes, fewer only at the end
        self.correlation = 0

    def request(self, api_key: int, version: int, message: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "txbroker-checker",
                                         message))
        size = self.stream.read(4)
        frame = self.stream.read(struct.unpack(">i", size)[0]) if len(size) == 4 else b""
        if not frame:
            raise ConnectionError("the broker closed the connection")
        return decode_response(api_key, version, frame)[1]

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


def read_log(bootstrap: str, topic: str, *, id_of: IdOf = key_id,
             timeout: float = 30, settle: float = 5.0) -> list[LogRecord]:
    """Every record of ``topic`` up to its high watermark, with its outcome. A
    transaction still open at the high watermark is waited for up to ``settle``
    seconds: its marker may be written already and not yet below the high watermark
    (it moves once the marker is fsynced), or on its way."""
    wire = _Wire(bootstrap, timeout)
    try:
        meta = wire.request(3, 5, metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False))
        (info,) = meta.topics
        if info.error_code.value:
            raise RuntimeError(f"metadata of {topic}: {info.error_code.name}")
        out: list[LogRecord] = []
        for partition in sorted(p.partition_index for p in info.partitions):
            out += _read_partition(wire, topic, partition, id_of, time.monotonic() + settle)
        return out
    finally:
        wire.close()


def share_start_offsets(bootstrap: str, group: str, topic: str, partitions: int, *,
                        timeout: float = 30) -> dict[int, int]:
    """A share group's start offset per partition of ``topic`` (DescribeShareGroupOffsets
    v0): below it every record is ACCEPTed, rejected or archived; -1 without state."""
    wire = _Wire(bootstrap, timeout)
    try:
        resp = wire.request(90, 0, share_offsets.DescribeShareGroupOffsetsRequest(groups=(
            share_offsets.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(
                share_offsets.DescribeShareGroupOffsetsRequestTopic(
                    topic_name=topic, partitions=tuple(range(partitions))),)),)))
        (answer,) = resp.groups
        if answer.error_code.value:
            raise RuntimeError(f"share-group offsets of {group}: {answer.error_code.name}")
        return {p.partition_index: p.start_offset for t in answer.topics for p in t.partitions}
    finally:
        wire.close()


def _read_partition(wire: _Wire, topic: str, partition: int,
                    id_of: IdOf, settle_by: float) -> list[LogRecord]:
    offset, high = 0, None
    batches, records = [], []
    while True:
        if high is not None and offset >= high:
            if time.monotonic() > settle_by or OPEN not in transaction_outcomes(
                    batches).values():
                break
            time.sleep(0.02)
        resp = wire.request(1, 4, fetch.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=FETCH_BYTES,
            isolation_level=READ_UNCOMMITTED, topics=(fetch.FetchTopic(topic=topic, partitions=(
                fetch.FetchPartition(partition=partition, fetch_offset=offset,
                                     partition_max_bytes=FETCH_BYTES),)),)))
        (part,) = resp.responses[0].partitions
        if part.error_code.value:
            raise RuntimeError(f"fetch {topic}-{partition}@{offset}: {part.error_code.name}")
        high = part.high_watermark
        raw = part.records or b""
        start = offset
        for pos, header in iter_batches(raw):
            if header.last_offset < offset:
                continue
            if header.is_control:
                kind = read_control_type(raw, pos)
                batches.append((header.base_offset, header.last_offset, header.producer_id,
                                True, "COMMIT" if kind == ControlType.COMMIT else "ABORT"))
            else:
                batches.append((header.base_offset, header.last_offset, header.producer_id,
                                header.is_transactional, None))
                records += [(r.offset, id_of(_as_chaos_record(topic, partition, r)))
                            for r in decode_records(raw, pos) if r.offset >= offset]
            offset = header.last_offset + 1
        if offset == start and offset < high:
            raise RuntimeError(f"fetch {topic}-{partition}@{offset}: no progress")
    outcomes = transaction_outcomes(batches)
    return [LogRecord(rid, topic, partition, off, outcomes.get(off, "plain"))
            for off, rid in records]


def _as_chaos_record(topic: str, partition: int, record: Record) -> ChaosRecord:
    return ChaosRecord(topic, partition, record.offset, record.key, record.value,
                       tuple(record.headers))
