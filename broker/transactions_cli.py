"""``txbroker transactions list | describe ID | find-hanging | abort`` (KIP-664).

Talks to a broker over the Kafka protocol (ListTransactions, DescribeTransactions,
DescribeProducers, WriteTxnMarkers), like Kafka's kafka-transactions.sh.
"""

from __future__ import annotations

import datetime
import sys
import time
from types import SimpleNamespace

from kio.schema.describe_producers.v0 import request as dp
from kio.schema.describe_transactions.v0 import request as dt
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1 import request as lt
from kio.schema.metadata.v12 import request as md
from kio.schema.write_txn_markers.v1 import request as wm

from protocol.primitives import (
    read_compact_nullable_string,
    read_int16,
    read_int32,
    read_int64,
    read_unsigned_varint,
    skip_tagged_fields,
)

from .admin_client import AdminConnection

OUT = sys.stdout


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)).rstrip(),
              file=OUT)


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def cmd_list(conn: AdminConnection, args) -> int:
    resp = conn.request(66, 1, lt.ListTransactionsRequest(
        state_filters=tuple(args.state or ()), producer_id_filters=tuple(args.producer_id or ()),
        duration_filter=-1))
    if resp.error_code != ErrorCode.none:
        print(f"error: {resp.error_code.name.upper()}", file=sys.stderr)
        return 1
    _table([[t.transactional_id, t.producer_id, t.transaction_state]
            for t in sorted(resp.transaction_states, key=lambda t: t.transactional_id)],
           ["TransactionalId", "ProducerId", "TransactionState"])
    return 0


def _describe_transactions(conn: AdminConnection, tids: tuple[str, ...]) -> list[SimpleNamespace]:
    """DescribeTransactions v0 (flexible), decoded here: kio cannot read the start time
    -1 that Kafka (and txbroker) send for an id without an ongoing transaction."""
    buf = conn.request_frame(65, 0, dt.DescribeTransactionsRequest(transactional_ids=tids))
    off = skip_tagged_fields(buf, 0)
    _throttle, off = read_int32(buf, off)
    n, off = read_unsigned_varint(buf, off)
    states = []
    for _ in range(max(n - 1, 0)):
        error, off = read_int16(buf, off)
        tid, off = read_compact_nullable_string(buf, off)
        state, off = read_compact_nullable_string(buf, off)
        timeout, off = read_int32(buf, off)
        start, off = read_int64(buf, off)
        pid, off = read_int64(buf, off)
        epoch, off = read_int16(buf, off)
        topics = []
        count, off = read_unsigned_varint(buf, off)
        for _ in range(max(count - 1, 0)):
            topic, off = read_compact_nullable_string(buf, off)
            parts = []
            m, off = read_unsigned_varint(buf, off)
            for _ in range(max(m - 1, 0)):
                p, off = read_int32(buf, off)
                parts.append(p)
            off = skip_tagged_fields(buf, off)
            topics.append(SimpleNamespace(topic=topic, partitions=parts))
        off = skip_tagged_fields(buf, off)
        states.append(SimpleNamespace(
            error_code=ErrorCode(error), transactional_id=tid, transaction_state=state,
            transaction_timeout=timeout, transaction_start_time=start, producer_id=pid,
            producer_epoch=epoch, topics=topics))
    return states


def cmd_describe(conn: AdminConnection, args) -> int:
    [state] = _describe_transactions(conn, (args.transactional_id,))
    if state.error_code != ErrorCode.none:
        print(f"error: {state.error_code.name.upper()}", file=sys.stderr)
        return 1
    start = _ms(state.transaction_start_time) if state.transaction_start_time else -1
    age = f"{int(time.time() * 1000) - start}" if start > 0 else "-"
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions) or "-"
    _table([[state.transactional_id, state.producer_id, state.producer_epoch,
             state.transaction_state, _ms(state.transaction_timeout), age, partitions]],
           ["TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "TransactionDurationMs", "TopicPartitions"])
    return 0


def _partitions(conn: AdminConnection, topic: str, partition: int | None) -> list[int]:
    if partition is not None:
        return [partition]
    resp = conn.request(3, 12, md.MetadataRequest(
        topics=(md.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    [t] = resp.topics
    if t.error_code != ErrorCode.none:
        raise SystemExit(f"error: topic {topic}: {t.error_code.name.upper()}")
    return sorted(p.partition_index for p in t.partitions)


def _producers(conn: AdminConnection, topic: str, partitions: list[int]):
    resp = conn.request(61, 0, dp.DescribeProducersRequest(
        topics=(dp.TopicRequest(name=topic, partition_indexes=tuple(partitions)),)))
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                raise SystemExit(f"error: {topic}-{p.partition_index}: "
                                 f"{p.error_code.name.upper()}")
            for producer in p.active_producers:
                yield p.partition_index, producer


def cmd_find_hanging(conn: AdminConnection, args) -> int:
    """Open transactions in the partitions that their coordinator does not know as
    ongoing there, or that are older than the maximum transaction timeout."""
    now = int(time.time() * 1000)
    rows = []
    for partition, producer in _producers(conn, args.topic,
                                          _partitions(conn, args.topic, args.partition)):
        if producer.current_txn_start_offset < 0:
            continue
        listed = conn.request(66, 1, lt.ListTransactionsRequest(
            state_filters=(), producer_id_filters=(producer.producer_id,), duration_filter=-1))
        known = False
        for t in listed.transaction_states:
            for s in _describe_transactions(conn, (t.transactional_id,)):
                if s.producer_id == producer.producer_id and s.transaction_state == "Ongoing" \
                        and any(x.topic == args.topic and partition in x.partitions
                                for x in s.topics):
                    known = True
        age = now - producer.last_timestamp if producer.last_timestamp >= 0 else -1
        if not known or age > args.max_transaction_timeout:
            rows.append([args.topic, partition, producer.producer_id, producer.producer_epoch,
                         producer.coordinator_epoch, producer.current_txn_start_offset,
                         producer.last_timestamp])
    _table(rows, ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                  "StartOffset", "LastTimestamp"])
    return 0


def cmd_abort(conn: AdminConnection, args) -> int:
    """Abort a hanging transaction in one partition by writing an ABORT marker."""
    pid, epoch, coord_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    if args.start_offset is not None:
        match = [p for part, p in _producers(conn, args.topic, [args.partition])
                 if p.current_txn_start_offset == args.start_offset]
        if not match:
            print(f"error: no open transaction starts at offset {args.start_offset} in "
                  f"{args.topic}-{args.partition}", file=sys.stderr)
            return 1
        pid, epoch, coord_epoch = (match[0].producer_id, match[0].producer_epoch,
                                   match[0].coordinator_epoch)
    if pid is None or epoch is None:
        print("error: give --start-offset, or --producer-id and --producer-epoch",
              file=sys.stderr)
        return 2
    resp = conn.request(27, 1, wm.WriteTxnMarkersRequest(markers=(wm.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False,
        topics=(wm.WritableTxnMarkerTopic(name=args.topic, partition_indexes=(args.partition,)),),
        coordinator_epoch=max(coord_epoch or 0, 0)),)))
    error = resp.markers[0].topics[0].partitions[0].error_code
    if error != ErrorCode.none:
        print(f"error: {error.name.upper()}", file=sys.stderr)
        return 1
    print(f"aborted the transaction of producer {pid} (epoch {epoch}) in "
          f"{args.topic}-{args.partition}", file=OUT)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("transactions", help="inspect and abort transactions (KIP-664)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="host:port")
    tsub = p.add_subparsers(dest="txn_command", required=True)
    ls = tsub.add_parser("list", help="transactional ids the coordinator knows")
    ls.add_argument("--state", action="append", help="filter by state (repeatable)")
    ls.add_argument("--producer-id", action="append", type=int, help="filter by producer id")
    d = tsub.add_parser("describe", help="one transactional id in detail")
    d.add_argument("transactional_id")
    fh = tsub.add_parser("find-hanging", help="open transactions their coordinator "
                         "does not know, or older than the maximum timeout")
    fh.add_argument("--topic", required=True)
    fh.add_argument("--partition", type=int)
    fh.add_argument("--max-transaction-timeout", type=int, default=900000,
                    help="ms (transaction.max.timeout.ms)")
    ab = tsub.add_parser("abort", help="write an ABORT marker for a hanging transaction")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    ab.add_argument("--start-offset", type=int, help="the transaction's first offset")
    ab.add_argument("--producer-id", type=int)
    ab.add_argument("--producer-epoch", type=int)
    ab.add_argument("--coordinator-epoch", type=int, default=0)


def run(args) -> int:
    commands = {"list": cmd_list, "describe": cmd_describe, "find-hanging": cmd_find_hanging,
                "abort": cmd_abort}
    try:
        with AdminConnection(args.bootstrap_server) as conn:
            return commands[args.txn_command](conn, args)
    except OSError as e:
        print(f"error: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
