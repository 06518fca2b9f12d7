"""Group configs (config resource type 32, KIP-848): per-group overrides of the broker's
``group.consumer.*`` keys, set with IncrementalAlterConfigs / AlterConfigs and listed by
DescribeConfigs.

txbroker takes the two keys that tune a consumer-protocol group,
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``; they apply from
the next heartbeat of the group's members. The other group configs Kafka 4.4 knows
(``share.*``, ``streams.*``, ``consumer.assignment.interval.ms``,
``errors.deadletterqueue.*``) tune protocols or features txbroker does not have yet and
are refused with INVALID_CONFIG, the code Kafka gives for a key it does not know.

Kafka keeps group configs in its metadata log; here they are a JSON file in the data
directory (``group-configs.json``, written durably), owned by :class:`GroupConfigStore`.
Validation is Kafka's, with its messages: a value must be an int within the broker's
``group.consumer.min.*`` / ``group.consumer.max.*`` keys, and the effective session
timeout must exceed the effective heartbeat interval.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.storage.durable_file import write_durably

__all__ = ["GROUP_CONFIGS_FILE", "GroupConfigKey", "GroupConfigStore", "KEYS", "SESSION_TIMEOUT",
           "HEARTBEAT_INTERVAL"]

log = logging.getLogger(__name__)

GROUP_CONFIGS_FILE = "group-configs.json"
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"

# Group configs of Kafka 4.4 that txbroker does not take yet (its DescribeConfigs of a
# group lists them): refused with a message that says so, not "unknown".
_NOT_YET = ("share.", "streams.", "errors.deadletterqueue.", "consumer.assignment.interval.ms")


@dataclass(frozen=True)
class GroupConfigKey:
    """A group config, the broker key that gives its default, and its documentation."""

    name: str
    broker_key: str
    kafka_default: str
    doc: str


KEYS: dict[str, GroupConfigKey] = {k.name: k for k in (
    GroupConfigKey(SESSION_TIMEOUT, "group.consumer.session.timeout.ms", "45000",
                   "The timeout to detect client failures when using the consumer group "
                   "protocol."),
    GroupConfigKey(HEARTBEAT_INTERVAL, "group.consumer.heartbeat.interval.ms", "5000",
                   "The heartbeat interval given to the members of a consumer group."),
)}


class GroupConfigStore:
    """Every group's overrides (group id -> key -> int), loaded from and written to
    ``group-configs.json`` in ``data_dir``. ``limits``: the broker's value, min and max of
    each key (``(value, lo, hi)`` by key name)."""

    def __init__(self, data_dir: str | None, limits: Mapping[str, tuple[int, int, int]]) -> None:
        self.path = os.path.join(data_dir, GROUP_CONFIGS_FILE) if data_dir else None
        self.limits = dict(limits)
        self.overrides: dict[str, dict[str, int]] = {}
        if self.path and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                stored = json.load(f)
            # A key a later version stored and this one does not know is dropped.
            self.overrides = {g: {k: int(v) for k, v in values.items() if k in KEYS}
                              for g, values in stored.items()}

    def get(self, group_id: str) -> dict[str, int]:
        """The overrides of ``group_id`` (empty if none)."""
        return self.overrides.get(group_id, {})

    def effective(self, group_id: str, name: str) -> int:
        """The value that applies to ``group_id``: its override, else the broker's."""
        return self.get(group_id).get(name, self.limits[name][0])

    def replace(self, group_id: str, new: Mapping[str, str | None], validate_only: bool = False
                ) -> dict[str, int]:
        """Make ``new`` (key -> value text) the whole override set of ``group_id`` after
        Kafka's checks (KafkaError INVALID_CONFIG / INVALID_REQUEST, nothing changed);
        stored durably unless ``validate_only``. Returns the parsed overrides."""
        if not group_id:
            raise KafkaError("Default group resources are not allowed.", ErrorCode.invalid_request)
        parsed = {name: self._parse(name, value) for name, value in new.items()}
        session = parsed.get(SESSION_TIMEOUT, self.limits[SESSION_TIMEOUT][0])
        heartbeat = parsed.get(HEARTBEAT_INTERVAL, self.limits[HEARTBEAT_INTERVAL][0])
        if session <= heartbeat:
            raise KafkaError(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}",
                             ErrorCode.invalid_config)
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

    def _parse(self, name: str, value: str | None) -> int:
        if name not in KEYS:
            if name.startswith(_NOT_YET):
                raise KafkaError(f"Group config {name} is not supported by txbroker yet: only "
                                 f"{SESSION_TIMEOUT} and {HEARTBEAT_INTERVAL} are.",
                                 ErrorCode.invalid_config)
            raise KafkaError(f"Unknown group config name: {name}", ErrorCode.invalid_config)
        if value is None:
            raise KafkaError(f"Null value not supported for : {name}", ErrorCode.invalid_request)
        try:
            number = int(value.strip())
        except ValueError:
            raise KafkaError(f"Invalid value {value} for configuration {name}: Not a number "
                             f"of type INT", ErrorCode.invalid_config) from None
        _broker, lo, hi = self.limits[name]
        if not lo <= number <= hi:
            raise KafkaError(f"{name} must be in the range {lo} to {hi} inclusive.",
                             ErrorCode.invalid_config)
        return number

    def _save(self) -> None:
        if self.path is None:
            return
        write_durably(self.path, json.dumps(self.overrides, sort_keys=True).encode())
