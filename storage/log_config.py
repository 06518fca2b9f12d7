"""Topic-level log configuration: Kafka's topic config names, defaults and parsing.

Each topic config has a broker-level default (Kafka's ``log.*`` name) that the
broker config may override; topic overrides come from CreateTopics and
IncrementalAlterConfigs and are persisted with the topic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A config value that cannot be accepted (maps to INVALID_CONFIG)."""


def _int_range(lo: int, hi: int = LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise ConfigError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ConfigError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip()
        if value not in options:
            raise ConfigError(f"{value!r} is not one of {', '.join(options)}")
        return value

    return parse


def _policy(text: str) -> str:
    parts = sorted({p.strip() for p in str(text).split(",") if p.strip()})
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{text!r} is not a valid cleanup.policy (delete, compact)")
    return ",".join(parts)


def _double(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a number") from None


def _text(text: str) -> str:
    return str(text)


@dataclass(frozen=True)
class TopicConfigDef:
    name: str  # topic-level name, e.g. segment.bytes
    broker_name: str | None  # broker default, e.g. log.segment.bytes
    default: str
    parse: Callable[[str], object]
    doc: str


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        TopicConfigDef("cleanup.policy", "log.cleanup.policy", "delete", _policy,
                       "delete: drop old segments by retention; compact: keep the last record per key"),
        TopicConfigDef("segment.bytes", "log.segment.bytes", "1073741824", _int_range(14),
                       "roll a new segment once the active one would exceed this size"),
        TopicConfigDef("segment.ms", "log.roll.ms", "604800000", _int_range(1),
                       "roll a new segment once the active one's first record is this old"),
        TopicConfigDef("segment.index.bytes", "log.index.size.max.bytes", "10485760", _int_range(8),
                       "maximum size of a segment's offset index; the segment rolls when full"),
        TopicConfigDef("index.interval.bytes", "log.index.interval.bytes", "4096", _int_range(0),
                       "bytes between offset/time index entries"),
        TopicConfigDef("retention.ms", "log.retention.ms", "604800000", _int_range(-1),
                       "delete segments whose newest record is older than this, the active one too (-1: forever)"),
        TopicConfigDef("retention.bytes", "log.retention.bytes", "-1", _int_range(-1),
                       "delete the oldest segments while the partition stays at this size without them (-1: no limit)"),
        TopicConfigDef("max.message.bytes", "message.max.bytes", "1048588", _int_range(0, 2**31 - 1),
                       "largest record batch accepted (MESSAGE_TOO_LARGE above)"),
        TopicConfigDef("message.timestamp.type", "log.message.timestamp.type", "CreateTime",
                       _choice("CreateTime", "LogAppendTime"),
                       "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time"),
        TopicConfigDef("flush.messages", "log.flush.interval.messages", "1", _int_range(1),
                       "1 (default): every append is fsynced by group commit before acks=all is "
                       "answered and before consumers see it; larger: fsync after this many messages"),
        TopicConfigDef("flush.ms", "log.flush.interval.ms", str(LONG_MAX), _int_range(0),
                       "with flush.messages > 1: also fsync dirty data this often"),
        TopicConfigDef("delete.retention.ms", "log.cleaner.delete.retention.ms", "86400000",
                       _int_range(0), "how long compaction keeps tombstones, and the markers of "
                       "transactions it removed all data of"),
        TopicConfigDef("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "0",
                       _int_range(0), "minimum age of a record before compaction may remove it"),
        TopicConfigDef("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", str(LONG_MAX),
                       _int_range(1), "maximum time a record stays uncompacted"),
        TopicConfigDef("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "0.5",
                       _double, "dirty fraction of the log that triggers compaction"),
        TopicConfigDef("compression.type", "compression.type", "producer",
                       _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
                       "accepted for compatibility; batches are always stored as produced"),
        TopicConfigDef("min.insync.replicas", "min.insync.replicas", "1", _int_range(1),
                       "accepted for compatibility; a single broker is the whole ISR"),
        TopicConfigDef("unclean.leader.election.enable", "unclean.leader.election.enable", "false",
                       _choice("true", "false"), "accepted for compatibility (no replicas)"),
        TopicConfigDef("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms",
                       str(LONG_MAX), _int_range(0),
                       "reject batches whose timestamp is further in the past (INVALID_TIMESTAMP)"),
        TopicConfigDef("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms",
                       "3600000", _int_range(0),
                       "reject batches whose timestamp is further in the future (INVALID_TIMESTAMP)"),
        TopicConfigDef("preallocate", "log.preallocate", "false", _choice("true", "false"),
                       "accepted for compatibility; segments are not preallocated"),
        TopicConfigDef("message.downconversion.enable", None, "true", _choice("true", "false"),
                       "accepted for compatibility; no down-conversion is ever done"),
        TopicConfigDef("file.delete.delay.ms", "log.segment.delete.delay.ms", "60000",
                       _int_range(0), "accepted for compatibility; deleted segments go at once"),
        TopicConfigDef("errors.deadletterqueue.group.enable", None, "false",
                       _choice("true", "false"),
                       "true: share groups may write their dead-letter records here (KIP-1191)"),
    ]
}


def validate_topic_config(name: str, value: str) -> object:
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"unknown topic config {name!r}")
    return definition.parse(value)


@dataclass(frozen=True)
class LogConfig:
    """The effective, parsed configuration of one partition log."""

    cleanup_policy: str = "delete"
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = 1
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = 3600000

    @property
    def fsync_every_append(self) -> bool:
        return self.flush_messages <= 1

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> LogConfig:
        """Build from topic config names to string values (defaults filled in)."""

        def get(name: str) -> object:
            d = TOPIC_CONFIGS[name]
            return d.parse(values.get(name, d.default))

        return cls(
            cleanup_policy=get("cleanup.policy"),
            segment_bytes=get("segment.bytes"),
            segment_ms=get("segment.ms"),
            segment_index_bytes=get("segment.index.bytes"),
            index_interval_bytes=get("index.interval.bytes"),
            retention_ms=get("retention.ms"),
            retention_bytes=get("retention.bytes"),
            max_message_bytes=get("max.message.bytes"),
            message_timestamp_type=get("message.timestamp.type"),
            flush_messages=get("flush.messages"),
            flush_ms=get("flush.ms"),
            delete_retention_ms=get("delete.retention.ms"),
            min_compaction_lag_ms=get("min.compaction.lag.ms"),
            max_compaction_lag_ms=get("max.compaction.lag.ms"),
            min_cleanable_dirty_ratio=get("min.cleanable.dirty.ratio"),
            timestamp_before_max_ms=get("message.timestamp.before.max.ms"),
            timestamp_after_max_ms=get("message.timestamp.after.max.ms"),
        )
