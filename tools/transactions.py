"""``txbroker transactions list | describe ID | describe-producers | find-hanging | abort``
(KIP-664).

Talks to a broker over the Kafka protocol (ListTransactions, DescribeTransactions,
DescribeProducers, WriteTxnMarkers), like Kafka's kafka-transactions.sh, with its
option names. find-hanging follows Kafka's rule (see cmd_find_hanging). abort also
checks, unlike Kafka's tool, that the producer's coordinator does not count the
partition in its transaction (it will write that marker itself); --force skips that.
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
from txbroker.protocol.primitives import (
    read_compact_nullable_string,
    read_int16,
    read_int32,
    read_int64,
    read_unsigned_varint,
    skip_tagged_fields,
)

from .admin_client import COMMAND_CONFIG_HELP, AdminConnection, bootstrap_connection

OUT = sys.stdout

# transaction.max.timeout.ms is an int: no transaction timeout exceeds this many minutes.
_MAX_TIMEOUT_MINUTES = (2**31 - 1) // 60_000


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
    tid = args.transactional_id_option or args.transactional_id
    if tid is None or (args.transactional_id_option and args.transactional_id
                       and args.transactional_id_option != args.transactional_id):
        print("error: give one transactional id (--transactional-id ID, or ID)", file=sys.stderr)
        return 2
    [state] = _describe_transactions(conn, (tid,))
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


def _search_partitions(conn: AdminConnection, topic: str | None, partition: int | None,
                       broker_id: int | None) -> dict[str, list[int]]:
    """topic -> partitions to search, as Kafka's find-hanging picks them: the partition
    given, else the topic's partitions (else every non-internal topic's), those with a
    replica on ``broker_id`` if given."""
    if topic is not None and partition is not None:
        return {topic: [partition]}
    resp = conn.request(3, 12, md.MetadataRequest(
        topics=None if topic is None else (md.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    found: dict[str, list[int]] = {}
    for t in sorted(resp.topics, key=lambda t: t.name or ""):
        if t.error_code != ErrorCode.none:
            if topic is not None:
                raise SystemExit(f"error: topic {topic}: {t.error_code.name.upper()}")
            continue
        if topic is None and t.is_internal:
            continue
        parts = sorted(p.partition_index for p in t.partitions
                       if broker_id is None or broker_id in p.replica_nodes)
        if parts:
            found[t.name] = parts
    return found


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


def _transactional_ids(conn: AdminConnection, producer_ids) -> dict[int, str]:
    """producer id -> the transactional id whose current producer id it is (ListTransactions
    filtered by producer id); ids without one are left out."""
    wanted = set(producer_ids)
    resp = conn.request(66, 1, lt.ListTransactionsRequest(
        state_filters=(), producer_id_filters=tuple(sorted(wanted)), duration_filter=-1))
    if resp.error_code != ErrorCode.none:
        raise SystemExit(f"error: cannot list the transactions of producers "
                         f"{', '.join(map(str, sorted(wanted)))}: {resp.error_code.name.upper()}")
    return {t.producer_id: t.transactional_id for t in resp.transaction_states
            if t.producer_id in wanted}


def _descriptions(conn: AdminConnection, tids) -> dict[str, SimpleNamespace | None]:
    """transactional id -> its DescribeTransactions state, None if the coordinator does
    not know it (TRANSACTIONAL_ID_NOT_FOUND); any other error ends the command."""
    tids = tuple(sorted(set(tids)))
    if not tids:
        return {}
    out: dict[str, SimpleNamespace | None] = {}
    for s in _describe_transactions(conn, tids):
        if s.error_code == ErrorCode.transactional_id_not_found:
            out[s.transactional_id] = None
        elif s.error_code != ErrorCode.none:
            raise SystemExit(f"error: cannot describe transactional id {s.transactional_id!r}: "
                             f"{s.error_code.name.upper()}")
        else:
            out[s.transactional_id] = s
    return out


def _includes(state: SimpleNamespace, topic: str, partition: int) -> bool:
    return any(t.topic == topic and partition in t.partitions for t in state.topics)


def _coordinator_transaction(conn: AdminConnection, producer_id: int, topic: str,
                             partition: int) -> SimpleNamespace | None:
    """The coordinator's transaction of ``producer_id`` if it includes ``topic-partition``
    (in any state: Ongoing, or PrepareCommit/PrepareAbort with its markers still to
    come), else None."""
    tid = _transactional_ids(conn, [producer_id]).get(producer_id)
    if tid is None:
        return None
    state = _descriptions(conn, [tid]).get(tid)
    if state is None or state.producer_id != producer_id or not _includes(state, topic, partition):
        return None
    return state


def cmd_find_hanging(conn: AdminConnection, args) -> int:
    """Kafka's rule (FindHangingTransactionsCommand): an open transaction in a partition
    (DescribeProducers) is a candidate when its last write is older than the maximum
    transaction timeout; a candidate is hanging unless its producer id is the current one
    of a transactional id (ListTransactions) whose transaction, as the coordinator
    describes it (DescribeTransactions, whatever the state), includes the partition."""
    if args.topic is None and args.broker_id is None:
        print("error: find-hanging needs --topic or --broker-id to limit the search",
              file=sys.stderr)
        return 2
    if args.partition is not None and args.topic is None:
        print("error: --partition needs --topic", file=sys.stderr)
        return 2
    if args.max_transaction_timeout_ms is not None:
        max_ms = args.max_transaction_timeout_ms
    elif args.max_transaction_timeout > _MAX_TIMEOUT_MINUTES:
        print(f"error: --max-transaction-timeout is in minutes, as in Kafka's "
              f"kafka-transactions.sh (at most {_MAX_TIMEOUT_MINUTES}: "
              f"transaction.max.timeout.ms is an int); milliseconds go to "
              f"--max-transaction-timeout-ms", file=sys.stderr)
        return 2
    else:
        max_ms = args.max_transaction_timeout * 60_000
    search = _search_partitions(conn, args.topic, args.partition, args.broker_id)

    now = int(time.time() * 1000)
    candidates = [(topic, partition, producer)
                  for topic, partitions in search.items()
                  for partition, producer in _producers(conn, topic, partitions)
                  if producer.current_txn_start_offset >= 0
                  and now - producer.last_timestamp > max_ms]
    hanging = []
    if candidates:
        tids = _transactional_ids(conn, {p.producer_id for _, _, p in candidates})
        states = _descriptions(conn, tids.values())
        for topic, partition, producer in candidates:
            tid = tids.get(producer.producer_id)
            state = states.get(tid) if tid is not None else None
            # Kafka looks at the partitions only; the producer id is compared too, in case
            # the id moved on to a new producer id between the two requests (which it only
            # does once the old one's transaction is complete).
            if state is None or state.producer_id != producer.producer_id \
                    or not _includes(state, topic, partition):
                hanging.append((topic, partition, producer))
    _table([[topic, partition, p.producer_id, p.producer_epoch, p.coordinator_epoch,
             p.current_txn_start_offset, p.last_timestamp, (now - p.last_timestamp) // 60_000]
            for topic, partition, p in hanging],
           ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
            "StartOffset", "LastTimestamp", "Duration(min)"])
    return 0


def cmd_describe_producers(conn: AdminConnection, args) -> int:
    """The producers a partition tracks (DescribeProducers), with Kafka's columns."""
    rows = [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
             p.last_timestamp,
             p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None"]
            for _partition, p in _producers(conn, args.topic, [args.partition])]
    _table(rows, ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                  "LastTimestamp", "CurrentTransactionStartOffset"])
    return 0


def cmd_abort(conn: AdminConnection, args) -> int:
    """Abort a hanging transaction in one partition by writing an ABORT marker, unless
    the producer's coordinator still counts the partition in its transaction."""
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
    if not args.force:
        try:
            state = _coordinator_transaction(conn, pid, args.topic, args.partition)
        except SystemExit as e:
            print(f"{e} (cannot check the coordinator; --force aborts anyway)", file=sys.stderr)
            return 1
        if state is not None:
            print(f"error: {args.topic}-{args.partition} is part of the "
                  f"{state.transaction_state} transaction of {state.transactional_id!r} "
                  f"(producer {pid}, epoch {state.producer_epoch}): its coordinator will end it "
                  f"there, and aborting it by hand would break its atomicity "
                  f"(--force aborts anyway)", file=sys.stderr)
            return 1
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
    p.add_argument("--bootstrap-server",
                   help="host:port (default: bootstrap.servers of --command-config, else "
                        "127.0.0.1:9092)")
    p.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    tsub = p.add_subparsers(dest="txn_command", required=True)
    ls = tsub.add_parser("list", help="transactional ids the coordinator knows")
    ls.add_argument("--state", action="append", help="filter by state (repeatable)")
    ls.add_argument("--producer-id", action="append", type=int, help="filter by producer id")
    d = tsub.add_parser("describe", help="one transactional id in detail")
    d.add_argument("transactional_id", nargs="?", help="(or --transactional-id, as in Kafka)")
    d.add_argument("--transactional-id", dest="transactional_id_option", metavar="ID")
    dp_ = tsub.add_parser("describe-producers",
                          help="the producers a partition tracks, and their open transactions")
    dp_.add_argument("--topic", required=True)
    dp_.add_argument("--partition", type=int, required=True)
    dp_.add_argument("--broker-id", type=int,
                     help="accepted for Kafka's options; a single broker answers anyway")
    fh = tsub.add_parser("find-hanging", help="open transactions older than the maximum "
                         "transaction timeout that their coordinator does not count in a "
                         "transaction of their producer")
    fh.add_argument("--topic", help="search this topic (or give --broker-id)")
    fh.add_argument("--partition", type=int, help="only this partition of --topic")
    fh.add_argument("--broker-id", type=int,
                    help="search every (non-internal) partition with a replica on this broker")
    timeout = fh.add_mutually_exclusive_group()
    timeout.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="only transactions whose last write is older than this "
                              "(transaction.max.timeout.ms, in minutes as in Kafka; "
                              "default 15)")
    timeout.add_argument("--max-transaction-timeout-ms", type=int, metavar="MS",
                         help="the same in milliseconds")
    ab = tsub.add_parser("abort", help="write an ABORT marker for a hanging transaction")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    ab.add_argument("--start-offset", type=int, help="the transaction's first offset")
    ab.add_argument("--producer-id", type=int)
    ab.add_argument("--producer-epoch", type=int)
    ab.add_argument("--coordinator-epoch", type=int, default=0)
    ab.add_argument("--force", action="store_true",
                    help="abort even when the producer's coordinator counts the partition "
                         "in its transaction (breaks that transaction's atomicity)")


def run(args) -> int:
    commands = {"list": cmd_list, "describe": cmd_describe,
                "describe-producers": cmd_describe_producers,
                "find-hanging": cmd_find_hanging, "abort": cmd_abort}
    conn = bootstrap_connection(args)
    if conn is None:
        return 1
    try:
        with conn:
            return commands[args.txn_command](conn, args)
    except OSError as e:
        print(f"error: connection to {conn.address} failed: {e}", file=sys.stderr)
        return 1
