"""Broker configuration with Kafka's names.

Sources, later ones winning: built-in defaults < properties file (``--config``)
< environment (``TXBROKER_`` + the key upper-cased with dots as underscores,
e.g. ``TXBROKER_NUM_PARTITIONS=3``) < command line (``--host/--port/--data-dir``
and ``--override key=value``). Every key is listed in docs/configuration.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from txbroker.storage.log_config import TOPIC_CONFIGS, ConfigError


def _bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(f"{text!r} is not a boolean")


def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ConfigError(f"{text!r} is not an integer") from None


def _str(text: str) -> str:
    return str(text).strip()


@dataclass(frozen=True)
class BrokerKey:
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str


BROKER_KEYS: dict[str, BrokerKey] = {
    k.name: k
    for k in [
        BrokerKey("listeners", "PLAINTEXT://127.0.0.1:9092", _str,
                  "where the broker listens; the first PLAINTEXT listener is used (port 0: any free port)"),
        BrokerKey("advertised.listeners", "", _str,
                  "host:port clients are told to connect to (default: the listener; a 0.0.0.0 "
                  "listener advertises the machine's host name)"),
        BrokerKey("node.id", "1", _int, "this broker's id in Metadata responses"),
        BrokerKey("log.dirs", "./txbroker-data", _str, "the data directory (one directory)"),
        BrokerKey("num.partitions", "1", _int, "partitions of auto-created topics and of "
                  "CreateTopics requests that leave the count to the broker (-1)"),
        BrokerKey("default.replication.factor", "1", _int,
                  "accepted for compatibility; only replication factor 1 (or -1) is possible"),
        BrokerKey("auto.create.topics.enable", "true", _bool,
                  "create a topic when a Metadata request names an unknown one and allows it"),
        BrokerKey("delete.topic.enable", "true", _bool, "allow DeleteTopics"),
        BrokerKey("socket.request.max.bytes", "104857600", _int,
                  "largest request frame accepted; larger ones close the connection (checked "
                  "before the body is read)"),
        BrokerKey("connections.max.idle.ms", "600000", _int,
                  "close connections idle for longer than this"),
        BrokerKey("queued.max.requests", "500", _int,
                  "requests a single connection may have in progress before the broker stops "
                  "reading from it"),
        BrokerKey("queued.max.request.bytes", "104857600", _int,
                  "request bytes held in memory across all connections; a connection whose "
                  "next request does not fit waits before its body is read (Kafka's default "
                  "-1 is unbounded; ours is bounded, and -1 still means unbounded)"),
        BrokerKey("fetch.max.bytes", "57671680", _int,
                  "most record bytes in one Fetch response, whatever the request's max_bytes "
                  "(the first batch is still returned whole when larger, as Kafka does)"),
        BrokerKey("log.retention.check.interval.ms", "300000", _int,
                  "how often retention (retention.ms / retention.bytes) is applied"),
        BrokerKey("log.cleaner.backoff.ms", "15000", _int,
                  "how long the log cleaner sleeps when no compacted log needs cleaning"),
        BrokerKey("producer.id.expiration.ms", "86400000", _int,
                  "forget an idempotent producer's per-partition state this long after its "
                  "last write (checked with retention)"),
        BrokerKey("log.retention.hours", "168", _int,
                  "retention in hours, used when log.retention.ms is not set"),
        BrokerKey("log.roll.hours", "168", _int,
                  "segment roll age in hours, used when log.roll.ms is not set"),
        BrokerKey("admin.http.port", "-1", _int,
                  "port of the admin/metrics HTTP endpoint (/health, /metrics, /topics); "
                  "-1 disables it, 0 picks a free port"),
        BrokerKey("admin.http.host", "127.0.0.1", _str, "address the admin HTTP endpoint binds"),
        BrokerKey("offsets.topic.num.partitions", "50", _int,
                  "partitions of __consumer_offsets (created on first group use)"),
        BrokerKey("offsets.topic.segment.bytes", "104857600", _int,
                  "segment size of __consumer_offsets (kept small so compaction can run)"),
        BrokerKey("offsets.retention.minutes", "10080", _int,
                  "committed offsets of a group expire this long after it became empty (or "
                  "after the commit, for groups that only commit)"),
        BrokerKey("offsets.retention.check.interval.ms", "600000", _int,
                  "how often expired offsets are removed"),
        BrokerKey("offset.metadata.max.bytes", "4096", _int,
                  "largest metadata string of a committed offset (OFFSET_METADATA_TOO_LARGE)"),
        BrokerKey("group.min.session.timeout.ms", "6000", _int,
                  "smallest session timeout a group member may ask for"),
        BrokerKey("group.max.session.timeout.ms", "1800000", _int,
                  "largest session timeout a group member may ask for"),
        BrokerKey("group.initial.rebalance.delay.ms", "3000", _int,
                  "how long the first rebalance of an empty group waits for more members"),
        BrokerKey("group.max.size", "2147483647", _int, "most members a group may have"),
        BrokerKey("transaction.state.log.num.partitions", "50", _int,
                  "partitions of __transaction_state (created on first transactional use)"),
        BrokerKey("transaction.state.log.segment.bytes", "104857600", _int,
                  "segment size of __transaction_state"),
        BrokerKey("transaction.max.timeout.ms", "900000", _int,
                  "largest transaction.timeout.ms a producer may ask for "
                  "(INVALID_TRANSACTION_TIMEOUT above)"),
        BrokerKey("transactional.id.expiration.ms", "604800000", _int,
                  "forget a transactional id this long after its last transaction ended"),
        BrokerKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", _int,
                  "how often transactions past their timeout are looked for and aborted"),
        BrokerKey("transaction.remove.expired.transaction.cleanup.interval.ms", "3600000", _int,
                  "how often expired transactional ids are removed"),
        BrokerKey("txbroker.fault.points", "", _str,
                  "fault injection for tests: point[=action],... with points "
                  "before_end_txn, after_prepare_durable, before_markers, after_first_marker, "
                  "before_complete, drop_end_txn_response and actions crash, power_loss, "
                  "delay:MS, drop, expire (docs/fault-injection.md)"),
        BrokerKey("shutdown.timeout.ms", "30000", _int,
                  "how long a clean shutdown waits for in-flight requests"),
        # Partition storms (issue 14): bounds checked before anything is created.
        BrokerKey("txbroker.max.partitions.per.request", "10000", _int,
                  "most partitions one CreateTopics (all its topics together) or "
                  "CreatePartitions (all its new partitions) may create; more fails the whole "
                  "request with POLICY_VIOLATION, as Kafka's controller does at its fixed "
                  "10000 (-1: no limit)"),
        BrokerKey("txbroker.max.partitions", "10000", _int,
                  "most partitions the broker holds (internal topics exempt); a creation "
                  "past it gets POLICY_VIOLATION. Each partition keeps one file descriptor "
                  "open (its active segment): keep it well below the open-files limit "
                  "(-1: no limit)"),
    ]
}

# Broker-level defaults for topic configs, by their broker name (log.segment.bytes, ...).
TOPIC_DEFAULT_KEYS = {d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name}


class BrokerConfig:
    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self.values: dict[str, str] = {}
        self.sources: dict[str, str] = {}
        for key, value in (values or {}).items():
            self.set(key, value, "override")

    def set(self, key: str, value: str, source: str) -> None:
        key = key.strip()
        if key in BROKER_KEYS:
            BROKER_KEYS[key].parse(value)
        elif key in TOPIC_DEFAULT_KEYS:
            TOPIC_DEFAULT_KEYS[key].parse(value)
        elif key in ("log.retention.minutes", "log.dir", "port", "host.name"):
            pass  # legacy aliases, resolved below
        else:
            raise ConfigError(f"unknown broker config {key!r}")
        self.values[key] = str(value).strip()
        self.sources[key] = source

    def get(self, key: str):
        if key in BROKER_KEYS:
            return BROKER_KEYS[key].parse(self.values.get(key, BROKER_KEYS[key].default))
        if key in TOPIC_DEFAULT_KEYS:
            return TOPIC_DEFAULT_KEYS[key].parse(self.raw(key))
        raise KeyError(key)

    def raw(self, key: str) -> str:
        if key in self.values:
            return self.values[key]
        if key == "log.retention.ms":
            if "log.retention.minutes" in self.values:
                return str(int(self.values["log.retention.minutes"]) * 60_000)
            if "log.retention.hours" in self.values:
                return str(int(self.values["log.retention.hours"]) * 3_600_000)
        if key == "log.roll.ms" and "log.roll.hours" in self.values:
            return str(int(self.values["log.roll.hours"]) * 3_600_000)
        if key == "log.dirs" and "log.dir" in self.values:
            return self.values["log.dir"]
        if key in BROKER_KEYS:
            return BROKER_KEYS[key].default
        return TOPIC_DEFAULT_KEYS[key].default

    def topic_defaults(self) -> dict[str, str]:
        """Topic config name -> broker-level value, for keys the operator set."""
        out = {}
        for broker_name, d in TOPIC_DEFAULT_KEYS.items():
            value = self.raw(broker_name)
            if value != d.default:
                out[d.name] = value
        return out

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    # --- convenience accessors ------------------------------------------------------

    @property
    def listener(self) -> tuple[str, int]:
        for item in self.get("listeners").split(","):
            item = item.strip()
            if "://" not in item:
                item = "PLAINTEXT://" + item
            parts = urlsplit(item)
            if parts.scheme.upper() == "PLAINTEXT":
                return parts.hostname or "0.0.0.0", parts.port if parts.port is not None else 9092
        raise ConfigError("listeners has no PLAINTEXT listener")

    @property
    def advertised(self) -> tuple[str, int] | None:
        text = self.get("advertised.listeners")
        if not text:
            return None
        item = text.split(",")[0].strip()
        if "://" not in item:
            item = "PLAINTEXT://" + item
        parts = urlsplit(item)
        if not parts.hostname or parts.port is None:
            raise ConfigError(f"advertised.listeners {text!r} needs host:port")
        return parts.hostname, parts.port

    @property
    def data_dir(self) -> str:
        return self.raw("log.dirs").split(",")[0].strip()


def parse_properties(text: str) -> dict[str, str]:
    """Java-style properties: key=value or key: value, # and ! comments."""
    out: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                out[key.strip()] = value.strip()
                break
        else:
            out[line] = ""
    return out


ENV_PREFIX = "TXBROKER_"


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    known = {k.upper().replace(".", "_"): k for k in list(BROKER_KEYS) + list(TOPIC_DEFAULT_KEYS)}
    out = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX):
            key = known.get(name[len(ENV_PREFIX):])
            if key is not None:
                out[key] = value
    return out


def load_config(*, config_file: str | None = None, host: str | None = None,
                port: int | None = None, data_dir: str | None = None,
                overrides: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> BrokerConfig:
    cfg = BrokerConfig()
    if config_file:
        with open(config_file) as f:
            for key, value in parse_properties(f.read()).items():
                cfg.set(key, value, f"file {config_file}")
    for key, value in env_overrides(os.environ if environ is None else environ).items():
        cfg.set(key, value, "environment")
    if host is not None or port is not None:
        cur_host, cur_port = cfg.listener
        cfg.set("listeners", f"PLAINTEXT://{host or cur_host}:{cur_port if port is None else port}",
                "command line")
    if data_dir is not None:
        cfg.set("log.dirs", data_dir, "command line")
    for key, value in (overrides or {}).items():
        cfg.set(key, value, "command line")
    return cfg


def markdown_reference() -> str:
    """The key tables of docs/configuration.md (a test keeps the file in sync)."""
    lines = [
        "## Broker keys", "",
        "| key | default | meaning |", "|---|---|---|",
    ]
    for key in BROKER_KEYS.values():
        lines.append(f"| `{key.name}` | `{key.default}` | {key.doc} |")
    lines += [
        "", "## Topic configs and their broker-level defaults", "",
        "Set per topic (CreateTopics, IncrementalAlterConfigs) by the topic name, or for all "
        "topics in the broker config by the broker name.", "",
        "| topic key | broker key | default | meaning |", "|---|---|---|---|",
    ]
    for d in TOPIC_CONFIGS.values():
        broker_name = f"`{d.broker_name}`" if d.broker_name else "-"
        lines.append(f"| `{d.name}` | {broker_name} | `{d.default}` | {d.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_reference(), end="")
