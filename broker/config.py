"""Broker configuration with Kafka's names.

Sources, later ones winning: built-in defaults < properties file (``--config``)
< environment (``TXBROKER_`` + the key upper-cased with dots as underscores,
e.g. ``TXBROKER_NUM_PARTITIONS=3``) < command line (``--host/--port/--data-dir``
and ``--override key=value``). Every key is listed in docs/configuration.md.

Every value is checked when it is set, and an error names the key and where the
value came from (file and line, environment variable, command-line option). Keys of
Kafka's that mean nothing on a single broker (``process.roles``,
``num.network.threads``, replication factors, ...) are accepted with one warning,
so Kafka's own ``server.properties`` starts txbroker; any other unknown key is an
error, and all of them are listed in one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from txbroker.storage.log_config import TOPIC_CONFIGS, ConfigError

from .authorizer import ACCEPTED_AUTHORIZERS

log = logging.getLogger("txbroker.config")


class StartupError(Exception):
    """The broker cannot start (a port in use, a data directory that is a file, ...):
    the message says what about, in one line."""


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


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _int(text)
        if not lo <= value <= hi:
            raise ConfigError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


def _client_auth(text: str) -> str:
    value = str(text).strip().lower()
    if value not in ("none", "requested", "required"):
        raise ConfigError(f"{text!r} is not one of none, requested, required")
    return value


def _split_listener(item: str) -> tuple[str, str, int | None]:
    """``NAME://host:port`` (or bare ``host:port``, PLAINTEXT) -> (NAME, host, port)."""
    item = item.strip()
    if "://" not in item:
        item = "PLAINTEXT://" + item
    parts = urlsplit(item)
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{item!r}: the port is not a number in [0, 65535]") from None
    return parts.scheme.upper(), parts.hostname or "", port


def _listeners(text: str) -> str:
    found_plaintext = False
    for item in filter(None, (x.strip() for x in str(text).split(","))):
        name, _host, port = _split_listener(item)
        if port is None:
            raise ConfigError(f"{item!r} needs a port (NAME://host:port)")
        found_plaintext = found_plaintext or name == "PLAINTEXT"
    if not found_plaintext:
        # Refused rather than served in plaintext: a client configured for TLS or SASL
        # would otherwise fail in confusing ways, or send secrets in the clear.
        raise ConfigError("no PLAINTEXT listener (txbroker serves PLAINTEXT only; SSL and "
                          "SASL listeners are not supported)")
    return str(text).strip()


def _advertised(text: str) -> str:
    text = str(text).strip()
    for item in filter(None, (x.strip() for x in text.split(","))):
        _name, host, port = _split_listener(item)
        if not host or port is None:
            raise ConfigError(f"{item!r} needs host:port (e.g. PLAINTEXT://kafka.example:9092)")
    return text


def _fault_points(text: str) -> str:
    from txbroker.coordinator.transaction.faults import parse_fault_points

    try:
        parse_fault_points(text)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return str(text).strip()


def _authorizer_class(text: str) -> str:
    value = str(text).strip()
    if value and value not in ACCEPTED_AUTHORIZERS:
        raise ConfigError(f"unknown authorizer class (accepted: empty for none, or "
                          f"{', '.join(ACCEPTED_AUTHORIZERS)})")
    return value


def _principals(text: str) -> str:
    for value in filter(None, (v.strip() for v in str(text).split(";"))):
        if ":" not in value:
            # Kafka's SecurityUtils.parseKafkaPrincipal refuses it the same way.
            raise ConfigError(f"{value!r} is not a principal (expected Type:name, e.g. "
                              f"User:admin)")
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
        BrokerKey("listeners", "PLAINTEXT://127.0.0.1:9092", _listeners,
                  "where the broker listens; the first PLAINTEXT listener is used (port 0: any free port)"),
        BrokerKey("advertised.listeners", "", _advertised,
                  "host:port clients are told to connect to (default: the listener; a 0.0.0.0 "
                  "listener advertises the machine's host name)"),
        BrokerKey("node.id", "1", _int_in(0, 2**31 - 1), "this broker's id in Metadata responses"),
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
        BrokerKey("admin.http.port", "-1", _int_in(-1, 65535),
                  "port of the admin/metrics HTTP endpoint (/health, /metrics, /topics); "
                  "-1 disables it, 0 picks a free port"),
        BrokerKey("admin.http.host", "127.0.0.1", _str, "address the admin HTTP endpoint binds"),
        BrokerKey("admin.http.ssl.keystore.location", "", _str,
                  "PEM file with the admin endpoint's private key and certificate chain "
                  "(Kafka's PEM keystore); set, the endpoint serves HTTPS only (TLS 1.2+)"),
        BrokerKey("admin.http.ssl.key.password", "", _str,
                  "password of an encrypted private key in admin.http.ssl.keystore.location"),
        BrokerKey("admin.http.ssl.truststore.location", "", _str,
                  "PEM file of the CAs whose client certificates admin.http.ssl.client.auth "
                  "accepts"),
        BrokerKey("admin.http.ssl.client.auth", "none", _client_auth,
                  "none, requested or required: ask HTTPS clients for a certificate signed by "
                  "admin.http.ssl.truststore.location (required: no certificate, no answer)"),
        BrokerKey("admin.http.auth.token.file", "", _str,
                  "file holding a bearer token; set, every path but /health needs the header "
                  "'Authorization: Bearer <token>' (answered 401 otherwise). Re-read when the "
                  "file changes (rotation without restart)"),
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
        BrokerKey("txbroker.transaction.version", "2", _int_in(0, 2),
                  "the finalized level of Kafka's transaction.version feature (what Kafka "
                  "chooses with `kafka-storage format --feature transaction.version=N`), "
                  "advertised in ApiVersions: at 2 Java 4.x producers use transactions v2 "
                  "(KIP-890: epoch bump per transaction, partitions added by Produce); "
                  "clients of transactions v1 work at every level"),
        BrokerKey("txbroker.fault.points", "", _fault_points,
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
        # ACLs (issue 15), with the keys of Kafka's StandardAuthorizer.
        BrokerKey("authorizer.class.name", "", _authorizer_class,
                  "the authorizer: empty (every request is allowed, as in Kafka without "
                  "one) or Kafka's `org.apache.kafka.metadata.authorizer.StandardAuthorizer` "
                  "(ACLs, checked per API as Kafka checks them; docs/security.md)"),
        BrokerKey("super.users", "", _principals,
                  "principals allowed everything whatever the ACLs, separated by semicolons "
                  "(e.g. `User:admin;User:ANONYMOUS`)"),
        BrokerKey("allow.everyone.if.no.acl.found", "false", _bool,
                  "with the authorizer on: allow an operation on a resource no ACL applies "
                  "to (default: deny)"),
    ]
}

# Broker-level defaults for topic configs, by their broker name (log.segment.bytes, ...).
TOPIC_DEFAULT_KEYS = {d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name}

# Kafka's older names, resolved in BrokerConfig.raw (log.dir) or renamed on set (broker.id).
ALIASES = {"log.retention.minutes": None, "log.dir": None, "broker.id": "node.id"}

# Kafka keys that mean nothing on one broker without replicas, controllers or thread
# pools: accepted (Kafka's own server.properties sets many of them) with one warning.
SINGLE_BROKER_KEYS = frozenset({
    "process.roles", "controller.listener.names", "inter.broker.listener.name",
    "inter.broker.protocol.version", "listener.security.protocol.map",
    "num.network.threads", "num.io.threads", "num.replica.fetchers",
    "num.recovery.threads.per.data.dir", "background.threads",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "socket.listen.backlog.size",
    "offsets.topic.replication.factor", "offsets.commit.required.acks",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "metadata.log.dir", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second",
    "auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage", "broker.rack", "group.coordinator.rebalance.protocols",
})
# ... and whole families of them (quorum, replication, ZooKeeper of Kafka 3).
SINGLE_BROKER_PREFIXES = ("controller.quorum.", "replica.", "zookeeper.", "metadata.log.")


def is_single_broker_key(key: str) -> bool:
    return key in SINGLE_BROKER_KEYS or key.startswith(SINGLE_BROKER_PREFIXES)


class UnknownConfigError(ConfigError):
    def __init__(self, key: str, source: str) -> None:
        super().__init__(f"unknown broker config {key!r} ({source})")
        self.key = key
        self.source = source


class BrokerConfig:
    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self.values: dict[str, str] = {}
        self.sources: dict[str, str] = {}
        # Kafka keys accepted but unused on one broker: key -> where it was set.
        self.ignored: dict[str, str] = {}
        for key, value in (values or {}).items():
            self.set(key, value, "override")

    def set(self, key: str, value: str, source: str) -> None:
        """Check and store one value; errors name the key, the value and ``source``."""
        key = key.strip()
        key = ALIASES.get(key) or key
        value = str(value).strip()
        try:
            if key in BROKER_KEYS:
                BROKER_KEYS[key].parse(value)
            elif key in TOPIC_DEFAULT_KEYS:
                TOPIC_DEFAULT_KEYS[key].parse(value)
            elif key == "log.retention.minutes":
                _int(value)
            elif key in ALIASES:
                pass
            elif is_single_broker_key(key):
                self.ignored[key] = source
                return
            else:
                raise UnknownConfigError(key, source)
        except UnknownConfigError:
            raise
        except ConfigError as e:
            raise ConfigError(f"{key}={value} ({source}): {e}") from None
        self.values[key] = value
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

    def check(self) -> list[str]:
        """Rules between keys (each key's own value was checked when set)."""
        problems = []
        queued, frame = self.get("queued.max.request.bytes"), self.get("socket.request.max.bytes")
        if 0 <= queued < frame:
            # As Kafka requires: else one allowed request could never be read.
            problems.append(
                f"queued.max.request.bytes={queued} ({self.source('queued.max.request.bytes')}) "
                f"must be -1 or at least socket.request.max.bytes={frame} "
                f"({self.source('socket.request.max.bytes')})")
        return problems

    # --- convenience accessors ------------------------------------------------------

    @property
    def listener(self) -> tuple[str, int]:
        """The first PLAINTEXT listener (others, e.g. Kafka's CONTROLLER, are not ours)."""
        for item in filter(None, (x.strip() for x in self.get("listeners").split(","))):
            name, host, port = _split_listener(item)
            if name == "PLAINTEXT":
                return host or "0.0.0.0", 9092 if port is None else port
        raise ConfigError("listeners has no PLAINTEXT listener")

    @property
    def advertised(self) -> tuple[str, int] | None:
        """The advertised PLAINTEXT listener (else the first one), if set."""
        text = self.get("advertised.listeners")
        if not text:
            return None
        items = [_split_listener(x) for x in text.split(",") if x.strip()]
        _name, host, port = next((i for i in items if i[0] == "PLAINTEXT"), items[0])
        if not host or port is None:
            raise ConfigError(f"advertised.listeners {text!r} needs host:port")
        return host, port

    @property
    def data_dir(self) -> str:
        return self.raw("log.dirs").split(",")[0].strip()


def parse_properties_lines(text: str) -> list[tuple[str, str, int]]:
    """Java-style properties as (key, value, line number): key=value or key: value,
    # and ! comments."""
    out: list[tuple[str, str, int]] = []
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                out.append((key.strip(), value.strip(), lineno))
                break
        else:
            out.append((line, "", lineno))
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Java-style properties: key=value or key: value, # and ! comments."""
    return {key: value for key, value, _ in parse_properties_lines(text)}


ENV_PREFIX = "TXBROKER_"
# Variables of ours that are not broker config: the Spark data source's test hooks.
ENV_NOT_CONFIG_PREFIXES = ("TXBROKER_SOURCE_",)


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_")


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """Config keys from ``TXBROKER_*`` variables. A variable that names no key is an
    error (a typo would otherwise silently leave the default in place)."""
    keys = [*BROKER_KEYS, *TOPIC_DEFAULT_KEYS, *ALIASES, *SINGLE_BROKER_KEYS]
    known = {env_name(k): k for k in keys}
    out, unknown = {}, []
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name.startswith(ENV_NOT_CONFIG_PREFIXES):
            continue
        if name in known:
            out[known[name]] = value
        else:
            unknown.append(name)
    if unknown:
        raise ConfigError(f"unknown environment variable{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown)}: {ENV_PREFIX}* variables set broker configs "
                          f"(e.g. {env_name('num.partitions')} for num.partitions)")
    return out


def load_config(*, config_file: str | None = None, host: str | None = None,
                port: int | None = None, data_dir: str | None = None,
                overrides: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """The broker config from every source (module docstring). All problems are
    reported together in one ConfigError, unknown keys first."""
    cfg = BrokerConfig()
    unknown: list[str] = []
    errors: list[str] = []

    def put(key: str, value: str, source: str) -> None:
        try:
            cfg.set(key, value, source)
        except UnknownConfigError as e:
            unknown.append(f"{e.key!r} ({e.source})")
        except ConfigError as e:
            errors.append(str(e))

    if config_file:
        try:
            with open(config_file) as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read --config {config_file}: "
                              f"{getattr(e, 'strerror', None) or e}") from None
        for key, value, lineno in parse_properties_lines(text):
            put(key, value, f"{config_file} line {lineno}")
    env = os.environ if environ is None else environ
    try:
        for key, value in env_overrides(env).items():
            put(key, value, f"environment variable {env_name(key)}")
    except ConfigError as e:
        errors.append(str(e))
    if host is not None or port is not None:
        if port is not None and not 0 <= port <= 65535:
            errors.append(f"--port {port} is outside [0, 65535]")
        else:
            try:
                cur_host, cur_port = cfg.listener
            except ConfigError:
                cur_host, cur_port = "127.0.0.1", 9092  # the listeners error is reported
            source = " ".join(o for o, v in (("--host", host), ("--port", port)) if v is not None)
            put("listeners",
                f"PLAINTEXT://{host or cur_host}:{cur_port if port is None else port}", source)
    if data_dir is not None:
        put("log.dirs", data_dir, "--data-dir")
    for key, value in (overrides or {}).items():
        put(key, value, f"--override {key}={value}")
    if not errors:
        errors += cfg.check()
    if unknown:
        errors.insert(0, f"unknown broker config{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(unknown)}")
    if errors:
        raise ConfigError("; ".join(errors))
    if cfg.ignored:
        log.warning("ignoring config%s that mean%s nothing on a single broker: %s",
                    "s" if len(cfg.ignored) > 1 else "", "" if len(cfg.ignored) > 1 else "s",
                    ", ".join(sorted(cfg.ignored)))
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
