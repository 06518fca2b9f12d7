"""Options of the ``txbroker`` source, named and serialised as Spark's Kafka source does.

Pure functions (no Spark, no sockets): option parsing and validation, the offset
JSON of ``startingOffsets`` / ``endingOffsets`` / streaming checkpoints
(``{"topic": {"0": 23, "1": -2}}``), the ``maxOffsetsPerTrigger`` split across
partitions and the ``minPartitions`` split of offset ranges.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from txbroker.client.security import (
    KAFKA_SECURITY_KEYS,
    ClientSecurity,
    SecurityConfigError,
)

from .wire import EARLIEST, LATEST, TxBrokerSourceError, WireClient, parse_bootstrap

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]

# Canonical spelling of every option we read; Spark hands options over case-insensitively.
OPTIONS = (
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "failOnDataLoss",
    "includeHeaders",
    "kafka.isolation.level",
    "kafka.request.timeout.ms",
    "kafka.max.partition.fetch.bytes",
    "kafka.client.id",
    # Spark hands kafka.* to Kafka's Java consumer: the security keys are its names.
    *sorted(f"kafka.{key}" for key in KAFKA_SECURITY_KEYS),
)
_CANONICAL = {name.lower(): name for name in OPTIONS}

# Options of Spark's Kafka source this source does not implement: named in the error.
_SPARK_ONLY = {name.lower(): name for name in (
    "startingOffsetsByTimestamp", "startingTimestamp", "endingOffsetsByTimestamp",
    "endingTimestamp", "startingOffsetsByTimestampStrategy", "minOffsetsPerTrigger",
    "maxTriggerDelay", "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "groupIdPrefix",
    "kafka.group.id", "includeTimestamp",
)}

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_FETCH_BYTES = 4 << 20


@dataclass(frozen=True)
class Subscription:
    """Exactly one of Spark's three ways to name partitions."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + json.dumps(offsets_json({tp: 0 for tp in self.assigned}))


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: str | OffsetMap  # "earliest" | "latest" | per-partition offsets (-2/-1 allowed)
    ending: str | OffsetMap  # batch only: "latest" | per-partition offsets (-1 allowed)
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_fetch_bytes: int = DEFAULT_FETCH_BYTES
    client_id: str = "txbroker-spark"
    security: ClientSecurity = ClientSecurity()

    @property
    def timeout(self) -> float:
        return self.timeout_ms / 1000


def _fail(message: str) -> TxBrokerSourceError:
    return TxBrokerSourceError(message)


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise _fail(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise _fail(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise _fail(f"option {name} must be a positive integer, got {raw!r}")
    return value


def parse_offsets_json(text: str, option: str) -> OffsetMap:
    """``{"topic": {"0": 23, "1": -2}}`` -> {("topic", 0): 23, ("topic", 1): -2}."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise _fail(f"option {option} is neither earliest/latest nor JSON like "
                    f'{{"topic":{{"0":23,"1":-2}}}}: {e}') from None
    if not isinstance(data, dict) or not data:
        raise _fail(f"option {option} must be a JSON object of topic -> "
                    f'{{partition: offset}}, like {{"topic":{{"0":23,"1":-2}}}}')
    out: OffsetMap = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise _fail(f"option {option}: topic {topic!r} must map partitions to offsets, "
                        f'like {{"{topic}":{{"0":23}}}}')
        for p, offset in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise _fail(f"option {option}: partition {p!r} of topic {topic!r} is not "
                            "a number") from None
            if partition < 0 or isinstance(offset, bool) or not isinstance(offset, int) \
                    or offset < -2:
                raise _fail(f"option {option}: offset {offset!r} of {topic}-{p} must be an "
                            "offset >= 0, -2 (earliest) or -1 (latest)")
            out[(topic, partition)] = offset
    return out


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-able form Spark's Kafka source writes to its checkpoint: topics and
    partitions in a fixed order, so equal offsets always serialise to equal strings."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition) in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_from_json(data: Mapping | str | None) -> OffsetMap:
    """Inverse of offsets_json (accepts the dict or its JSON text)."""
    if data is None:
        return {}
    if isinstance(data, str):
        data = json.loads(data)
    return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise _fail(f'option assign must be JSON like {{"topic":[0,1]}}: {e}') from None
    if not isinstance(data, dict) or not data or not all(
            isinstance(v, list) and v and all(isinstance(p, int) and not isinstance(p, bool)
                                              and p >= 0 for p in v) for v in data.values()):
        raise _fail(f'option assign must be JSON like {{"topic":[0,1]}}, got {text!r}')
    return tuple(sorted({(t, p) for t, parts in data.items() for p in parts}))


def _check_names(opts: Mapping[str, str]) -> None:
    for key in opts:
        low = key.lower()
        if low in _CANONICAL:
            continue
        if low in _SPARK_ONLY:
            raise _fail(f"option {_SPARK_ONLY[low]} of Spark's Kafka source is not supported "
                        "by the txbroker source")
        if low.startswith("kafka."):
            raise _fail(f"Kafka client option {key} is not supported by the txbroker source "
                        "(supported: " + ", ".join(o for o in OPTIONS if o.startswith("kafka."))
                        + ")")
        hint = difflib.get_close_matches(low, list(_CANONICAL), n=1)
        suggestion = f" (did you mean {_CANONICAL[hint[0]]}?)" if hint else ""
        raise _fail(f"unknown option {key!r} for the txbroker source{suggestion}")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign")
             if opts.get(name.lower()) is not None]
    if len(given) != 1:
        raise _fail("give exactly one of the options subscribe, subscribePattern, assign"
                    + (f" (got {', '.join(given)})" if given else ""))
    kind = given[0]
    raw = str(opts[kind.lower()])
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise _fail("option subscribe must name at least one topic (comma-separated)")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        if not raw.strip():
            raise _fail("option subscribePattern must be a regular expression")
        try:
            re.compile(raw)
        except re.error as e:
            raise _fail(f"option subscribePattern={raw!r} is not a valid regex: {e}") from None
        return Subscription(kind, pattern=raw)
    return Subscription(kind, assigned=_parse_assign(raw))


def _offsets_option(opts: Mapping[str, str], name: str, default: str) -> str | OffsetMap:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    return parse_offsets_json(text, name)


def parse_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate the options of a read. ``streaming`` None checks only what both kinds share
    (used when Spark asks for the schema before it says which kind of read it is)."""
    opts = {str(k).lower(): v for k, v in options.items()}
    _check_names(opts)
    servers = opts.get("kafka.bootstrap.servers")
    if servers is None or not str(servers).strip():
        raise _fail("option kafka.bootstrap.servers is required (host:port of the broker)")
    parse_bootstrap(str(servers))
    isolation = opts.get("kafka.isolation.level")
    if isolation is not None and str(isolation).strip().lower() != "read_committed":
        raise _fail(f"kafka.isolation.level={isolation}: the txbroker source reads "
                    "read_committed only (it never returns records of aborted or open "
                    "transactions); remove the option or set it to read_committed")
    try:
        security = ClientSecurity.from_properties(opts, prefix="kafka.",
                                                  source="the txbroker source's options")
    except SecurityConfigError as e:
        raise _fail(str(e)) from None
    subscription = _subscription(opts)
    starting = _offsets_option(opts, "startingOffsets", "latest" if streaming else "earliest")
    ending = _offsets_option(opts, "endingOffsets", "latest")
    if streaming and "endingoffsets" in opts:
        raise _fail("option endingOffsets is for batch queries only (a stream has no end)")
    if streaming is False:
        if starting == "latest":
            raise _fail("startingOffsets=latest is not valid for batch queries "
                        "(use earliest or per-partition JSON)")
        if isinstance(starting, dict) and any(o == LATEST for o in starting.values()):
            raise _fail("startingOffsets: -1 (latest) is not valid for batch queries")
        if ending == "earliest":
            raise _fail("endingOffsets=earliest is not valid for batch queries "
                        "(use latest or per-partition JSON)")
        if isinstance(ending, dict) and any(o == EARLIEST for o in ending.values()):
            raise _fail("endingOffsets: -2 (earliest) is not valid for batch queries")
    for name, value in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(value, dict) and subscription.kind == "assign":
            extra = sorted(set(value) - set(subscription.assigned))
            if extra:
                raise _fail(f"option {name} names {_tps(extra)}, which assign does not")
    return SourceOptions(
        bootstrap_servers=str(servers).strip(),
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(opts, "minPartitions"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        timeout_ms=_positive_int(opts, "kafka.request.timeout.ms") or DEFAULT_TIMEOUT_MS,
        max_fetch_bytes=_positive_int(opts, "kafka.max.partition.fetch.bytes")
        or DEFAULT_FETCH_BYTES,
        client_id=str(opts.get("kafka.client.id") or "txbroker-spark"),
        security=security,
    )


def include_headers(options: Mapping[str, str]) -> bool:
    opts = {str(k).lower(): v for k, v in options.items()}
    return _bool(opts, "includeHeaders", False)


def _tps(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def select_partitions(subscription: Subscription, topics: Mapping[str, Mapping[int, int]],
                      *, missing_ok: bool = False) -> list[TopicPartition]:
    """The partitions a subscription names, given topic -> {partition: leader} of the
    cluster (for subscribe/assign, only the named topics need to be present; with
    ``missing_ok`` a subscribed topic not there has no partitions)."""
    if subscription.kind == "subscribePattern":
        pattern = re.compile(subscription.pattern or "")
        names = [t for t in topics if pattern.fullmatch(t)]
        return sorted((t, p) for t in names for p in topics[t])
    if subscription.kind == "subscribe":
        return sorted((t, p) for t in subscription.topics
                      for p in (topics.get(t, {}) if missing_ok else topics[t]))
    missing = [tp for tp in subscription.assigned if tp[1] not in topics.get(tp[0], {})]
    if missing:
        raise _fail(f"assign names partitions that do not exist: {_tps(missing)}")
    return list(subscription.assigned)


def resolve_offsets(option: str, spec: str | OffsetMap, partitions: Sequence[TopicPartition],
                    earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
                    ) -> OffsetMap:
    """Concrete offsets of ``spec`` for every partition. JSON must name every partition,
    as Spark's Kafka source requires (-2 earliest, -1 latest)."""
    if spec == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if spec == "latest":
        return {tp: latest[tp] for tp in partitions}
    assert isinstance(spec, dict)
    missing = [tp for tp in partitions if tp not in spec]
    extra = [tp for tp in spec if tp not in set(partitions)]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"it lacks {_tps(missing)}")
        if extra:
            parts.append(f"{_tps(extra)} are not subscribed")
        raise _fail(f"option {option} must give an offset for every subscribed partition "
                    f"(-2 earliest, -1 latest): {'; '.join(parts)}")
    out = {}
    for tp in partitions:
        o = spec[tp]
        out[tp] = earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_offsets: int) -> OffsetMap:
    """End offsets for one micro-batch of at most about ``max_offsets`` offsets.

    Like Spark's Kafka source, the limit is shared in proportion to each partition's
    backlog; a partition with a backlog whose share rounds below one still moves by one
    (so no partition starves), which can exceed the limit by a few offsets. A partition
    missing from ``start`` is new and starts at offset 0."""
    backlog = {tp: max(0, end - start.get(tp, 0)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, 0)
        if not backlog[tp]:
            out[tp] = max(begin, end)
            continue
        share = max_offsets * backlog[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = begin + min(backlog[tp], step)
    return out


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: Sequence[Range], min_partitions: int | None) -> list[Range]:
    """Split offset ranges so there are at least ``min_partitions`` of them (Spark's
    ``minPartitions``): big ranges get more pieces, each piece a contiguous sub-range."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[Range] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        step = r.size / pieces
        bounds = [r.start + round(i * step) for i in range(pieces)] + [r.end]
        out.extend(Range(r.topic, r.partition, a, b)
                   for a, b in zip(bounds, bounds[1:], strict=False) if b > a)
    return out


def open_client(opts: SourceOptions) -> WireClient:
    """A wire client as the options say (servers, timeout, client id, TLS/SASL)."""
    return WireClient(opts.bootstrap_servers, timeout=opts.timeout, client_id=opts.client_id,
                      security=opts.security)
