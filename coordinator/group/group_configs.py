"""Group configs (config resource type 32, KIP-848 / KIP-932 / KIP-1191): per-group
overrides of the broker's ``group.consumer.*`` and ``group.share.*`` keys, set with
IncrementalAlterConfigs / AlterConfigs and listed by DescribeConfigs.

txbroker takes the consumer-protocol keys ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``, every ``share.*`` and ``streams.*`` key and the two
``errors.deadletterqueue.*`` keys. ``consumer.assignment.interval.ms`` /
``consumer.assignor.offload.enable`` are refused with INVALID_CONFIG and a message that
says so.

Kafka keeps group configs in its metadata log; here they are a JSON file in the data
directory (``group-configs.json``, written durably, typed JSON values; a file of an
older txbroker holds ints only), owned by :class:`GroupConfigStore`. Validation is Kafka
4.4's ``GroupConfig.validate``, with its messages and order: names, then each value's
type and floor in definition order, then the range given by the broker's
``group.*.min.*`` / ``group.*.max.*`` keys (for ``streams.*``: Kafka's defaults of
``group.streams.min/max.*``, which txbroker has no broker keys for), then session timeout
> heartbeat interval, then the dead-letter topic name.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.storage.durable_file import write_durably

__all__ = ["GROUP_CONFIGS_FILE", "GroupConfigKey", "GroupConfigStore", "KEYS", "SESSION_TIMEOUT",
           "HEARTBEAT_INTERVAL", "SHARE_SESSION_TIMEOUT", "SHARE_HEARTBEAT_INTERVAL",
           "DLQ_TOPIC_NAME", "DLQ_COPY_RECORD_ENABLE", "KAFKA_LIMITS", "Value",
           "STREAMS_SESSION_TIMEOUT", "STREAMS_HEARTBEAT_INTERVAL",
           "STREAMS_NUM_STANDBY_REPLICAS", "STREAMS_TASK_OFFSET_INTERVAL", "STREAMS_ASSIGNORS",
           "STREAMS_INITIAL_REBALANCE_DELAY", "STREAMS_ASSIGNMENT_INTERVAL",
           "STREAMS_RACK_TAGS", "STREAMS_ACCEPTABLE_RECOVERY_LAG", "STREAMS_ASSIGNOR_NAME",
           "config_text", "by_duration_ms"]

log = logging.getLogger(__name__)

GROUP_CONFIGS_FILE = "group-configs.json"
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
STREAMS_TASK_OFFSET_INTERVAL = "streams.task.offset.interval.ms"
STREAMS_INITIAL_REBALANCE_DELAY = "streams.initial.rebalance.delay.ms"
STREAMS_ASSIGNMENT_INTERVAL = "streams.assignment.interval.ms"
STREAMS_RACK_TAGS = "streams.rack.aware.assignment.tags"
STREAMS_ACCEPTABLE_RECOVERY_LAG = "streams.acceptable.recovery.lag"
STREAMS_ASSIGNOR_NAME = "streams.assignor.name"

Value = int | bool | str

_NOT_YET = "not supported by txbroker yet"


@dataclass(frozen=True)
class GroupConfigKey:
    """A group config as Kafka 4.4's GroupConfig defines it: its type (Kafka's ConfigDef
    type name), default as Kafka lists it, documentation, the broker key that gives its
    default (its synonym, None if Kafka has none), the floor of its own validator,
    whether Kafka calls it internal, and why txbroker refuses it (None: taken)."""

    name: str
    type: str
    kafka_default: str
    doc: str
    broker_key: str | None = None
    floor: int | None = None
    internal: bool = False
    refused: str | None = None


def _k(name, type_, default, doc, broker_key=None, floor=None, internal=False, refused=None):
    return GroupConfigKey(name, type_, default, doc, broker_key, floor, internal, refused)


_AOR_DOC = (
    "The strategy to initialize the share-partition start offset. <ul><li>earliest: "
    "automatically reset the offset to the earliest offset</li><li>latest: automatically "
    "reset the offset to the latest offset</li><li>by_duration:&lt;duration&gt;: "
    "automatically reset the offset to a configured duration from the current timestamp. "
    "&lt;duration&gt; must be specified in ISO8601 format (PnDTnHnMn.nS). Negative duration "
    "is not allowed.</li><li>anything else: throw exception to the share consumer.</li></ul>")
_ISOLATION_DOC = (
    "Controls how to read records written transactionally. If set to \"read_committed\", "
    "the share group will only deliver transactional records which have been committed. If "
    "set to \"read_uncommitted\", the share group will return all messages, even "
    "transactional messages which have been aborted. Non-transactional records will be "
    "returned unconditionally in either mode.")

# Kafka 4.4's GroupConfig.CONFIG_DEF, in its order (the order of its type checks).
KEYS: dict[str, GroupConfigKey] = {k.name: k for k in (
    _k(SESSION_TIMEOUT, "INT", "45000", "The timeout to detect client failures when using "
       "the consumer group protocol.", "group.consumer.session.timeout.ms", 1),
    _k(HEARTBEAT_INTERVAL, "INT", "5000", "The heartbeat interval given to the members of a "
       "consumer group.", "group.consumer.heartbeat.interval.ms", 1),
    _k("consumer.assignment.interval.ms", "INT", "1000", "The interval between assignment "
       "updates for a consumer group.", "group.consumer.assignment.interval.ms", 0,
       refused=_NOT_YET),
    _k("consumer.assignor.offload.enable", "BOOLEAN", "true", "Whether to offload consumer "
       "group assignment to a group coordinator background thread.",
       "group.consumer.assignor.offload.enable", internal=True, refused=_NOT_YET),
    _k(SHARE_SESSION_TIMEOUT, "INT", "45000", "The timeout to detect client failures when "
       "using the share group protocol.", "group.share.session.timeout.ms", 1),
    _k(SHARE_HEARTBEAT_INTERVAL, "INT", "5000", "The heartbeat interval given to the members "
       "of a share group.", "group.share.heartbeat.interval.ms", 1),
    _k("share.record.lock.duration.ms", "INT", "30000", "The record acquisition lock duration "
       "in milliseconds for share groups.", "group.share.record.lock.duration.ms", 1000),
    _k("share.delivery.count.limit", "INT", "5", "The maximum number of delivery attempts "
       "for a record delivered to a share group.", "group.share.delivery.count.limit", 2),
    _k("share.partition.max.record.locks", "INT", "2000", "Share-group record lock limit per "
       "share-partition.", "group.share.partition.max.record.locks", 100),
    _k("share.auto.offset.reset", "STRING", "latest", _AOR_DOC),
    _k("share.isolation.level", "STRING", "read_uncommitted", _ISOLATION_DOC),
    _k("share.renew.acknowledge.enable", "BOOLEAN", "true", "Whether the renew acknowledge "
       "type is enabled for the share group."),
    _k("share.assignment.interval.ms", "INT", "1000", "The interval between assignment "
       "updates for a share group.", "group.share.assignment.interval.ms", 0),
    _k("share.assignor.offload.enable", "BOOLEAN", "true", "Whether to offload share group "
       "assignment to a group coordinator background thread.",
       "group.share.assignor.offload.enable", internal=True),
    _k("streams.session.timeout.ms", "INT", "45000", "The timeout to detect client failures "
       "when using the streams group protocol.", "group.streams.session.timeout.ms", 1),
    _k("streams.heartbeat.interval.ms", "INT", "5000", "The heartbeat interval given to the "
       "members.", "group.streams.heartbeat.interval.ms", 1),
    _k("streams.num.standby.replicas", "INT", "0", "The number of standby replicas for each "
       "task.", "group.streams.num.standby.replicas", 0),
    _k("streams.initial.rebalance.delay.ms", "INT", "3000", "The amount of time the group "
       "coordinator will wait for more streams clients to join a new group before "
       "performing the first rebalance. A longer delay means potentially fewer rebalances.",
       "group.streams.initial.rebalance.delay.ms", 0),
    _k("streams.assignment.interval.ms", "INT", "1000", "The interval between assignment "
       "updates for a streams group.", "group.streams.assignment.interval.ms", 0),
    _k("streams.assignor.offload.enable", "BOOLEAN", "true", "Whether to offload streams "
       "group assignment to a group coordinator background thread.",
       "group.streams.assignor.offload.enable", internal=True),
    _k("streams.task.offset.interval.ms", "INT", "60000", "The interval in which the warmup "
       "task changelog offsets on a client are updated on the broker. The offsets are sent "
       "with the next heartbeat after this time has passed.",
       "group.streams.task.offset.interval.ms", 1, internal=True),
    _k("streams.num.warmup.replicas", "INT", "2", "The maximum number of warmup task "
       "replicas.", "group.streams.num.warmup.replicas", 0, internal=True),
    _k("streams.rack.aware.assignment.tags", "LIST", "", "List of client tag keys used to "
       "distribute standby replicas across Kafka Streams instances. When configured, and the "
       "used broker-side assignor supports it, it will make a best-effort to distribute "
       "standby tasks over each client tag dimension.",
       "group.streams.rack.aware.assignment.tags"),
    _k("streams.acceptable.recovery.lag", "LONG", "10000", "The maximum acceptable lag "
       "(number of offsets to catch up) for a client to be considered caught-up enough to "
       "receive an active task assignment.", "group.streams.acceptable.recovery.lag", 0,
       internal=True),
    # Kafka lists the first of group.streams.assignors, its synonym, as the default.
    _k("streams.assignor.name", "STRING", "sticky", "The task assignor to use for this streams "
       "group, selected by short name from the assignors registered via the broker "
       "configuration group.streams.assignors. When unset, the group defaults to the first "
       "assignor configured in the broker's group.streams.assignors setting. Changing the "
       "assignor does not trigger a rebalance for the group; the new assignor takes effect "
       "on the next rebalance.", "group.streams.assignors"),
    _k(DLQ_TOPIC_NAME, "STRING", "", "The name of the topic to be used as the dead-letter "
       "queue (DLQ) topic for this share group. If blank (the default), the group does not "
       "have a DLQ topic."),
    _k(DLQ_COPY_RECORD_ENABLE, "BOOLEAN", "false", "When writing onto the dead-letter queue "
       "topic, whether to copy the original record onto the DLQ topic, or just write a "
       "record containing the context information headers."),
)}

# Kafka's defaults of each range-checked key: (broker value, broker min, broker max) of
# group.<protocol>.<key>, group.<protocol>.min.<key>, group.<protocol>.max.<key>. The
# broker's own keys replace them (GroupConfigStore's ``limits``).
KAFKA_LIMITS: dict[str, tuple[int, int, int]] = {
    SESSION_TIMEOUT: (45000, 45000, 60000),
    HEARTBEAT_INTERVAL: (5000, 5000, 15000),
    SHARE_SESSION_TIMEOUT: (45000, 45000, 60000),
    SHARE_HEARTBEAT_INTERVAL: (5000, 5000, 15000),
    "share.record.lock.duration.ms": (30000, 15000, 60000),
    "share.delivery.count.limit": (5, 2, 10),
    "share.partition.max.record.locks": (2000, 100, 4000),
    "share.assignment.interval.ms": (1000, 0, 15000),
    STREAMS_SESSION_TIMEOUT: (45000, 45000, 60000),
    STREAMS_HEARTBEAT_INTERVAL: (5000, 5000, 15000),
    "streams.assignment.interval.ms": (1000, 0, 15000),
}
# Keys with one bound only (group.streams.max.standby.replicas,
# group.streams.min.task.offset.interval.ms, group.streams.max.warmup.replicas).
_KAFKA_MAXIMA = {STREAMS_NUM_STANDBY_REPLICAS: 2, "streams.num.warmup.replicas": 20}
_KAFKA_MINIMA = {STREAMS_TASK_OFFSET_INTERVAL: 15000}
# The order of Kafka's GroupConfig.validateValues (the first failing check answers).
_BOUND_ORDER = (HEARTBEAT_INTERVAL, SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL,
                SHARE_SESSION_TIMEOUT, "share.record.lock.duration.ms",
                "share.delivery.count.limit", "share.partition.max.record.locks",
                "share.assignment.interval.ms", STREAMS_HEARTBEAT_INTERVAL,
                STREAMS_SESSION_TIMEOUT, STREAMS_NUM_STANDBY_REPLICAS,
                "streams.assignment.interval.ms", STREAMS_TASK_OFFSET_INTERVAL,
                "streams.num.warmup.replicas")
# Kafka 4.4's only built-in task assignor (group.streams.assignors), the one txbroker has.
STREAMS_ASSIGNORS = ("sticky",)
_SESSION_PAIRS = ((SESSION_TIMEOUT, HEARTBEAT_INTERVAL),
                  (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL),
                  (STREAMS_SESSION_TIMEOUT, STREAMS_HEARTBEAT_INTERVAL))
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_INT_RANGE = (-2**31, 2**31 - 1)

# ISO-8601 as java.time.Duration.parse reads it (days, hours, minutes, seconds with up
# to 9 fraction digits, each optionally signed); Kafka refuses a negative total.
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:(T)(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def by_duration_ms(text: str) -> int | None:
    """The milliseconds of a ``by_duration:`` ISO-8601 duration (``PT1H``), None if it
    is not one Kafka takes (malformed or negative)."""
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    sign, days, t, hours, minutes, seconds, fraction = m.groups()
    if not (days or hours or minutes or seconds) or (t and not (hours or minutes or seconds)):
        return None
    total_ns = ((int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
                 + int(seconds or 0)) * 10**9)
    if fraction:
        nanos = int(fraction.ljust(9, "0"))
        total_ns += -nanos if (seconds or "").startswith("-") else nanos
    if sign == "-":
        total_ns = -total_ns
    return None if total_ns < 0 else total_ns // 10**6


def config_text(value: Value) -> str:
    """A typed value as Kafka writes it (booleans in lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _invalid(name: str, value: str, why: str) -> KafkaError:
    return KafkaError(f"Invalid value {value} for configuration {name}: {why}",
                      ErrorCode.invalid_config)


def _parse(key: GroupConfigKey, raw: str) -> Value:
    """``raw`` as Kafka's ConfigDef parses it (trimmed) and checks it with the key's own
    validator (not the broker's bounds)."""
    name, text = key.name, raw.strip()
    if key.type in ("INT", "LONG"):
        try:
            if not text.lstrip("+-").isascii() or "_" in text:
                raise ValueError(text)  # Python's int() reads "1_000"; Java's does not
            number = int(text)
        except ValueError:
            raise _invalid(name, raw, f"Not a number of type {key.type}") from None
        if key.type == "INT" and not _INT_RANGE[0] <= number <= _INT_RANGE[1]:
            raise _invalid(name, raw, "Not a number of type INT")
        if key.floor is not None and number < key.floor:
            raise _invalid(name, str(number), f"Value must be at least {key.floor}")
        return number
    if key.type == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise _invalid(name, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if name == "share.auto.offset.reset":
        if text not in ("earliest", "latest") and not (
                text.startswith("by_duration:") and by_duration_ms(text[12:]) is not None):
            raise _invalid(name, text, f"Invalid value `{text}` for configuration {name}. The "
                           "value must be either 'earliest', 'latest' or of the format "
                           "'by_duration:<PnDTnHnMn.nS>'.")
    elif name == "share.isolation.level" and text not in _ISOLATION_LEVELS:
        raise _invalid(name, text, "String must be one of: read_committed, read_uncommitted")
    return text


def _check_rack_tags(text: str | None) -> None:
    """Kafka checks the tag list for duplicates before it parses any value."""
    if text is None or not text.strip():
        return
    tags = re.split(r"\s*,\s*", text.strip())
    if len(set(tags)) != len(tags):
        raise KafkaError(f"{STREAMS_RACK_TAGS} must not contain duplicate tag keys.",
                         ErrorCode.invalid_config)


def _load(stored: Mapping[str, object]) -> dict[str, Value]:
    """A group's stored overrides, typed. An older txbroker stored ints only; a key this
    version does not take, or a value it cannot read, is dropped with a warning."""
    out: dict[str, Value] = {}
    for name, value in stored.items():
        key = KEYS.get(name)
        try:
            if key is None or key.refused is not None:
                raise KafkaError(f"{name} is not taken", ErrorCode.invalid_config)
            text = config_text(value) if isinstance(value, bool | int | str) else "?"
            out[name] = _parse(key, text)
        except KafkaError as e:
            log.warning("%s: group config %s=%r dropped: %s", GROUP_CONFIGS_FILE, name, value, e)
    return out


class GroupConfigStore:
    """Every group's overrides (group id -> key -> typed value), loaded from and written
    to ``group-configs.json`` in ``data_dir``. ``limits``: the broker's value, min and max
    of a range-checked key (``(value, lo, hi)`` by key name; Kafka's defaults for the
    keys not given). ``defaults``: the broker's value of any other key (Kafka's default
    for the keys not given)."""

    def __init__(self, data_dir: str | None, limits: Mapping[str, tuple[int, int, int]],
                 defaults: Mapping[str, Value] | None = None) -> None:
        self.path = os.path.join(data_dir, GROUP_CONFIGS_FILE) if data_dir else None
        self.limits = {**KAFKA_LIMITS, **limits}
        self.defaults: dict[str, Value] = {
            name: _parse(key, key.kafka_default) for name, key in KEYS.items()
            if key.refused is None}
        self.defaults.update({name: lo_hi[0] for name, lo_hi in self.limits.items()})
        self.defaults.update(defaults or {})
        self.overrides: dict[str, dict[str, Value]] = {}
        if self.path and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                stored = json.load(f)
            self.overrides = {g: typed for g, values in stored.items() if (typed := _load(values))}

    def get(self, group_id: str) -> dict[str, Value]:
        """The overrides of ``group_id`` (empty if none)."""
        return self.overrides.get(group_id, {})

    def value(self, group_id: str, name: str) -> Value:
        """The value of group config ``name`` that applies to ``group_id``: its override,
        else the broker's default (KeyError for a key txbroker does not take)."""
        group = self.overrides.get(group_id)
        if group is not None and name in group:
            return group[name]
        return self.defaults[name]

    effective = value

    def replace(self, group_id: str, new: Mapping[str, str | None], validate_only: bool = False
                ) -> dict[str, Value]:
        """Make ``new`` (key -> value text) the whole override set of ``group_id`` after
        Kafka's checks (KafkaError INVALID_CONFIG / INVALID_REQUEST, nothing changed);
        stored durably unless ``validate_only``. Returns the parsed overrides."""
        if not group_id:
            raise KafkaError("Default group resources are not allowed.", ErrorCode.invalid_request)
        parsed = self.validate(new)
        if validate_only:
            return parsed
        before = self.overrides.get(group_id)
        if parsed:
            self.overrides[group_id] = parsed
        else:
            self.overrides.pop(group_id, None)
        try:
            self._save()
        except OSError:
            # Memory stays what the file says: an answer of failure changed nothing.
            if before is None:
                self.overrides.pop(group_id, None)
            else:
                self.overrides[group_id] = before
            raise
        log.info("group %r configs: %s", group_id, parsed or "broker defaults")
        return parsed

    def validate(self, new: Mapping[str, str | None]) -> dict[str, Value]:
        """``new`` parsed, or KafkaError: Kafka 4.4's checks in its order."""
        for name, text in new.items():
            key = KEYS.get(name)
            if key is None:
                raise KafkaError(f"Unknown group config name: {name}", ErrorCode.invalid_config)
            if key.refused is not None:
                raise KafkaError(f"Group config {name} is {key.refused}.",
                                 ErrorCode.invalid_config)
            if text is None:
                raise KafkaError(f"Null value not supported for : {name}",
                                 ErrorCode.invalid_request)
        _check_rack_tags(new.get(STREAMS_RACK_TAGS))
        parsed = {name: _parse(key, new[name]) for name, key in KEYS.items() if name in new}
        for name in _BOUND_ORDER:
            self._check_bounds(name, parsed.get(name))
        assignor = parsed.get("streams.assignor.name")
        if assignor is not None and assignor not in STREAMS_ASSIGNORS:
            raise KafkaError(f"streams.assignor.name '{assignor}' is not a registered task "
                             f"assignor. Registered assignors are: [{', '.join(STREAMS_ASSIGNORS)}].",
                             ErrorCode.invalid_config)
        for session_key, heartbeat_key in _SESSION_PAIRS:
            if session_key in parsed or heartbeat_key in parsed:
                session = parsed.get(session_key, self.defaults[session_key])
                heartbeat = parsed.get(heartbeat_key, self.defaults[heartbeat_key])
                if session <= heartbeat:  # type: ignore[operator]
                    raise KafkaError(f"{session_key} must be greater than {heartbeat_key}",
                                     ErrorCode.invalid_config)
        dlq = parsed.get(DLQ_TOPIC_NAME)
        if isinstance(dlq, str) and dlq.startswith("__"):
            raise KafkaError(f"{DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'",
                             ErrorCode.invalid_config)
        return parsed

    def _check_bounds(self, name: str, value: Value | None) -> None:
        if not isinstance(value, int):
            return
        if name in self.limits:
            _value, lo, hi = self.limits[name]
            if not lo <= value <= hi:
                raise KafkaError(f"{name} must be in the range {lo} to {hi} inclusive.",
                                 ErrorCode.invalid_config)
        elif name in _KAFKA_MAXIMA and value > _KAFKA_MAXIMA[name]:
            raise KafkaError(f"{name} must be less than or equal to {_KAFKA_MAXIMA[name]}",
                             ErrorCode.invalid_config)
        elif name in _KAFKA_MINIMA and value < _KAFKA_MINIMA[name]:
            raise KafkaError(f"{name} must be greater than or equal to {_KAFKA_MINIMA[name]}",
                             ErrorCode.invalid_config)

    def _save(self) -> None:
        if self.path is None:
            return
        write_durably(self.path, json.dumps(self.overrides, sort_keys=True).encode())
