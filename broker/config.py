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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from txbroker.protocol.properties import parse_properties_lines
from txbroker.storage.log_config import TOPIC_CONFIGS, ConfigError

from .security.authorizer import ACCEPTED_AUTHORIZERS

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
    """``NAME://host:port`` (or bare ``host:port``, PLAINTEXT) -> (NAME, host, port).
    Not urlsplit: listener names such as SASL_SSL are not valid URL schemes."""
    item = item.strip()
    if "://" not in item:
        item = "PLAINTEXT://" + item
    name, _, address = item.partition("://")
    m = re.fullmatch(r"(\[[^\]]*\]|[^:/\[\]]*)(?::([^:/]*))?/?", address)
    if m is None:
        raise ConfigError(f"{item!r} is not NAME://host:port")
    host, port_text = m.group(1).strip("[]"), m.group(2)
    port = None
    if port_text is not None:
        if not port_text.isdigit() or int(port_text) > 65535:
            raise ConfigError(f"{item!r}: the port is not a number in [0, 65535]")
        port = int(port_text)
    return name.upper(), host, port


def _listeners(text: str) -> str:
    names = set()
    for item in filter(None, (x.strip() for x in str(text).split(","))):
        name, _host, port = _split_listener(item)
        if port is None:
            raise ConfigError(f"{item!r} needs a port (NAME://host:port)")
        if not re.fullmatch(r"[A-Z0-9_]+", name):
            raise ConfigError(f"{item!r}: a listener name is letters, digits and '_'")
        if name in names:
            raise ConfigError(f"listener name {name} appears twice")
        names.add(name)
    if not names:
        raise ConfigError("no listener (NAME://host:port,...)")
    return str(text).strip()


def _advertised(text: str) -> str:
    text = str(text).strip()
    for item in filter(None, (x.strip() for x in text.split(","))):
        _name, host, port = _split_listener(item)
        if not host or port is None:
            raise ConfigError(f"{item!r} needs host:port (e.g. PLAINTEXT://kafka.example:9092)")
    return text


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` (Kafka's listener.security.protocol.map)."""
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in str(text).split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"{item!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{item!r}: the security protocol must be one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        out[name] = protocol
    return out


def _names(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in choices:
            raise ConfigError(f"{text!r} is not one of {', '.join(choices)}")
        return value

    return parse


def _tls_protocols(text: str) -> list[str]:
    names = _names(text)
    for name in names:
        if name not in ("TLSv1.2", "TLSv1.3", "TLSv1", "TLSv1.1"):
            raise ConfigError(f"{name!r} is not a TLS protocol name (TLSv1.2, TLSv1.3)")
    return names


def _store_type(text: str) -> str:
    value = str(text).strip().upper()
    if value not in ("JKS", "PKCS12", "PEM"):
        raise ConfigError(f"{text!r} is not one of JKS, PKCS12, PEM")
    return value


def _mechanisms(text: str) -> list[str]:
    return [m.upper() for m in _names(text)]


def _checked_by(parse, text: str) -> str:
    """``text`` stripped, once ``parse`` accepts it (its ValueError as a ConfigError);
    the parsers are imported by the callers, lazily, to keep serve's start-up light."""
    try:
        parse(text)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return str(text).strip()


def _principal_rules(text: str) -> str:
    from .security.tls import parse_principal_mapping_rules

    return _checked_by(parse_principal_mapping_rules, text)


def _fault_points(text: str) -> str:
    from txbroker.coordinator.transaction.faults import parse_fault_points

    return _checked_by(parse_fault_points, text)


def _faults(text: str) -> str:
    if not str(text).strip():
        return ""  # no fault (the default): fault_spec.py is not part of the start-up
    from .fault_spec import load_fault_specs

    return _checked_by(load_fault_specs, text)


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
                  "where the broker listens: NAME://host:port,... (port 0: any free port); each "
                  "name maps to a security protocol by listener.security.protocol.map; listeners "
                  "named in controller.listener.names are not served"),
        BrokerKey("advertised.listeners", "", _advertised,
                  "NAME://host:port per listener name: what Metadata, FindCoordinator and "
                  "DescribeCluster tell a client that connected through that listener (default: "
                  "the listener itself; a 0.0.0.0 listener advertises the machine's host name)"),
        BrokerKey("listener.security.protocol.map",
                  "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
                  _protocol_map, "listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
        BrokerKey("controller.listener.names", "", _names,
                  "listeners of a KRaft controller (Kafka's server.properties names one): "
                  "accepted and not served"),
        # TLS. Each ssl.* key and sasl.enabled.mechanisms may also be set per listener as
        # listener.name.<listener name in lower case>.<key>, which wins over the global one.
        BrokerKey("ssl.keystore.type", "JKS", _store_type,
                  "PEM or PKCS12 (Kafka's default JKS is not supported: set PEM or PKCS12 on a "
                  "TLS listener)"),
        BrokerKey("ssl.keystore.location", "", _str,
                  "the server's key store file: PEM (private key and certificate chain in one "
                  "file) or PKCS12"),
        BrokerKey("ssl.keystore.password", "", _str, "password of a PKCS12 key store"),
        BrokerKey("ssl.keystore.certificate.chain", "", _str,
                  "PEM certificate chain given inline (with ssl.keystore.key, ssl.keystore.type=PEM)"),
        BrokerKey("ssl.keystore.key", "", _str,
                  "PEM private key given inline (ssl.keystore.type=PEM)"),
        BrokerKey("ssl.key.password", "", _str, "password of an encrypted PEM private key"),
        BrokerKey("ssl.truststore.type", "JKS", _store_type,
                  "PEM (ssl.truststore.location or ssl.truststore.certificates) or PKCS12; the "
                  "CAs client certificates are checked against"),
        BrokerKey("ssl.truststore.location", "", _str, "trust store file (PEM CA certificates or PKCS12)"),
        BrokerKey("ssl.truststore.password", "", _str, "password of a PKCS12 trust store"),
        BrokerKey("ssl.truststore.certificates", "", _str, "PEM CA certificates given inline"),
        BrokerKey("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", _tls_protocols,
                  "TLS versions accepted (TLSv1.2 is the minimum txbroker serves)"),
        BrokerKey("ssl.protocol", "TLSv1.3", _str,
                  "accepted for compatibility; ssl.enabled.protocols decides"),
        BrokerKey("ssl.cipher.suites", "", _names,
                  "OpenSSL names of the TLS 1.2 cipher suites to allow (empty: Python's defaults)"),
        BrokerKey("ssl.client.auth", "none", _one_of("none", "requested", "required"),
                  "client certificates: none, requested (checked when sent) or required (mTLS)"),
        BrokerKey("ssl.principal.mapping.rules", "DEFAULT", _principal_rules,
                  "client certificate subject (RFC 2253) -> principal name: DEFAULT or "
                  "RULE:pattern/replacement/[LU],... as Kafka's SslPrincipalMapper"),
        BrokerKey("ssl.endpoint.identification.algorithm", "https", _str,
                  "accepted for compatibility (a client-side check; unused by the broker)"),
        # SASL.
        BrokerKey("sasl.enabled.mechanisms", "GSSAPI", _mechanisms,
                  "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
                  "OAUTHBEARER (Kafka's default GSSAPI is not supported)"),
        BrokerKey("sasl.jaas.config", "", _str,
                  "JAAS config used when no listener.name.<listener>.<mechanism>.sasl.jaas.config "
                  "is set: PLAIN users as user_<name>=\"<password>\" of PlainLoginModule, "
                  "OAUTHBEARER unsecuredValidator* options"),
        BrokerKey("sasl.server.max.receive.size", "524288", _int,
                  "largest request frame accepted before a SASL connection is authenticated"),
        BrokerKey("connection.failed.authentication.delay.ms", "100", _int,
                  "how long a failed authentication waits before its answer and the close"),
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
        BrokerKey("admin.http.console.enable", "true", _bool,
                  "serve the web console at the admin endpoint's / (docs/console.md)"),
        BrokerKey("admin.http.console.read.only", "false", _bool,
                  "the console only shows: no abort action even with the admin token"),
        BrokerKey("admin.http.console.principal", "User:ANONYMOUS", _str,
                  "principal the console's actions are authorized as when an authorizer "
                  "is on (e.g. a super user, or one with WRITE on the transactional ids)"),
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
        BrokerKey("group.consumer.heartbeat.interval.ms", "5000", _int,
                  "heartbeat interval given to consumer-protocol group members (KIP-848)"),
        BrokerKey("group.consumer.min.heartbeat.interval.ms", "2000", _int,
                  "smallest allowed group.consumer.heartbeat.interval.ms"),
        BrokerKey("group.consumer.max.heartbeat.interval.ms", "15000", _int,
                  "largest allowed group.consumer.heartbeat.interval.ms"),
        BrokerKey("group.consumer.session.timeout.ms", "45000", _int,
                  "a consumer-protocol member without a heartbeat for this long is removed"),
        BrokerKey("group.consumer.min.session.timeout.ms", "45000", _int,
                  "smallest allowed group.consumer.session.timeout.ms"),
        BrokerKey("group.consumer.max.session.timeout.ms", "60000", _int,
                  "largest allowed group.consumer.session.timeout.ms"),
        BrokerKey("group.consumer.max.size", "2147483647", _int,
                  "most members a consumer-protocol group may have (GROUP_MAX_SIZE_REACHED)"),
        BrokerKey("group.consumer.migration.policy", "bidirectional",
                  _one_of("bidirectional", "upgrade", "downgrade", "disabled"),
                  "online migration between classic and consumer groups: upgrade a classic "
                  "group when a consumer-protocol member joins, downgrade it when the last "
                  "one leaves (bidirectional, upgrade, downgrade or disabled)"),
        # Streams groups (KIP-1071: served while streams.version is 1, the default).
        BrokerKey("group.streams.session.timeout.ms", "45000", _int_in(1, 2**31 - 1),
                  "a streams-group member without a heartbeat for this long is removed"),
        BrokerKey("group.streams.heartbeat.interval.ms", "5000", _int_in(1, 2**31 - 1),
                  "the heartbeat interval given to the members of a streams group"),
        BrokerKey("group.streams.num.standby.replicas", "0", _int_in(0, 2),
                  "standby replicas of each stateful task of a streams group"),
        BrokerKey("group.streams.initial.rebalance.delay.ms", "3000", _int_in(0, 2**31 - 1),
                  "the first task assignment of a streams group that a member joins while "
                  "Empty waits this long for more members (meanwhile the heartbeat answers "
                  "the ASSIGNMENT_DELAYED status); 0 assigns at once"),
        BrokerKey("group.streams.assignment.interval.ms", "1000", _int_in(0, 15000),
                  "a streams group computes a new task assignment at most this often (a "
                  "change within it waits, with the ASSIGNMENT_DELAYED status); 0: at once"),
        BrokerKey("group.streams.max.size", "2147483647", _int_in(1, 2**31 - 1),
                  "most members a streams group may have (GROUP_MAX_SIZE_REACHED)"),
        BrokerKey("group.streams.task.offset.interval.ms", "60000", _int_in(1, 2**31 - 1),
                  "how often streams-group members are asked to send their task offsets"),
        # Share groups (KIP-932; on at share.version 1 and 2, the default).
        BrokerKey("group.share.session.timeout.ms", "45000", _int_in(1, 2**31 - 1),
                  "a share-group member without a heartbeat for this long is removed"),
        BrokerKey("group.share.heartbeat.interval.ms", "5000", _int_in(1, 2**31 - 1),
                  "the heartbeat interval given to the members of a share group"),
        BrokerKey("group.share.max.size", "200", _int_in(1, 1000),
                  "most members a share group may have (GROUP_MAX_SIZE_REACHED)"),
        BrokerKey("group.share.record.lock.duration.ms", "30000", _int_in(1000, 3600000),
                  "how long a share consumer holds the records a ShareFetch acquired for it "
                  "before they are offered again"),
        BrokerKey("group.share.delivery.count.limit", "5", _int_in(2, 10),
                  "deliveries of a record to share consumers before it is archived"),
        BrokerKey("group.share.partition.max.record.locks", "2000", _int_in(100, 10000),
                  "most in-flight records of a share-partition"),
        # The bounds of a share group's own share.* group configs (group_configs.py).
        BrokerKey("group.share.min.session.timeout.ms", "45000", _int_in(1, 2**31 - 1),
                  "the least share.session.timeout.ms a share group may set"),
        BrokerKey("group.share.max.session.timeout.ms", "60000", _int_in(1, 2**31 - 1),
                  "the greatest share.session.timeout.ms a share group may set"),
        BrokerKey("group.share.min.heartbeat.interval.ms", "5000", _int_in(1, 2**31 - 1),
                  "the least share.heartbeat.interval.ms a share group may set"),
        BrokerKey("group.share.max.heartbeat.interval.ms", "15000", _int_in(1, 2**31 - 1),
                  "the greatest share.heartbeat.interval.ms a share group may set"),
        BrokerKey("group.share.min.record.lock.duration.ms", "15000", _int_in(1000, 30000),
                  "the least share.record.lock.duration.ms a share group may set"),
        BrokerKey("group.share.max.record.lock.duration.ms", "60000", _int_in(30000, 3600000),
                  "the greatest share.record.lock.duration.ms a share group may set"),
        BrokerKey("group.share.min.delivery.count.limit", "2", _int_in(2, 5),
                  "the least share.delivery.count.limit a share group may set"),
        BrokerKey("group.share.max.delivery.count.limit", "10", _int_in(5, 25),
                  "the greatest share.delivery.count.limit a share group may set"),
        BrokerKey("group.share.min.partition.max.record.locks", "100", _int_in(100, 2000),
                  "the least share.partition.max.record.locks a share group may set"),
        BrokerKey("group.share.max.partition.max.record.locks", "4000", _int_in(2000, 10000),
                  "the greatest share.partition.max.record.locks a share group may set"),
        BrokerKey("group.share.max.share.sessions", "2000", _int_in(1, 2**31 - 1),
                  "most share sessions (SHARE_SESSION_LIMIT_REACHED past it)"),
        # Dead-letter topics of share groups (KIP-1191, share.version 2).
        BrokerKey("errors.deadletterqueue.topic.name.prefix", "dlq.", _str,
                  "the prefix every share group's dead-letter topic name must have (empty: "
                  "any name)"),
        BrokerKey("errors.deadletterqueue.auto.create.topics.enable", "false", _bool,
                  "create a share group's dead-letter topic (num.partitions partitions) when "
                  "it does not exist"),
        BrokerKey("share.coordinator.state.topic.num.partitions", "50", _int_in(1, 2**31 - 1),
                  "partitions of __share_group_state, created on first use"),
        BrokerKey("share.coordinator.state.topic.segment.bytes", "104857600", _int,
                  "segment size of __share_group_state"),
        BrokerKey("share.coordinator.snapshot.update.records.per.snapshot", "500",
                  _int_in(0, 500),
                  "ShareUpdate records of a share-partition between two ShareSnapshots"),
        BrokerKey("txbroker.share.auto.offset.reset", "latest",
                  _one_of("latest", "earliest"),
                  "where a share group starts reading a partition it has never read, for "
                  "the groups without their own share.auto.offset.reset group config "
                  "(Kafka has no broker key: its default is latest)"),
        BrokerKey("txbroker.share.isolation.level", "read_uncommitted",
                  _one_of("read_uncommitted", "read_committed"),
                  "the share.isolation.level of the share groups without their own group "
                  "config (Kafka has no broker key: its default is read_uncommitted)"),
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
                  "the first finalized level of Kafka's transaction.version feature (what "
                  "Kafka chooses with `kafka-storage format --feature "
                  "transaction.version=N`), advertised in ApiVersions: at 2 Java 4.x "
                  "producers use transactions v2 (KIP-890: epoch bump per transaction, "
                  "partitions added by Produce); clients of transactions v1 work at every "
                  "level. Once UpdateFeatures (`kafka-features upgrade/downgrade`) changed "
                  "the level, the level it stored in the data dir wins over this key"),
        BrokerKey("txbroker.share.version", "2", _int_in(0, 2),
                  "the first finalized level of Kafka's share.version feature: 1 turns on "
                  "share groups (KIP-932: ShareGroupHeartbeat, ShareGroupDescribe, "
                  "ShareFetch, ShareAcknowledge and the share-group offsets APIs "
                  "advertised and served), 2 (the default, as on a new Kafka 4.4 cluster) "
                  "also their dead-letter topics (KIP-1191); 0 leaves them off. "
                  "Once UpdateFeatures changed the level, "
                  "the level it stored in the data dir wins over this key"),
        BrokerKey("txbroker.streams.version", "1", _int_in(0, 1),
                  "the first finalized level of Kafka's streams.version feature: 1 (the "
                  "default, as on a new Kafka 4.4 cluster) turns on streams groups "
                  "(KIP-1071: StreamsGroupHeartbeat and StreamsGroupDescribe advertised "
                  "and served); 0 leaves them off. Once UpdateFeatures changed the level, "
                  "the level it stored in the data dir wins over this key"),
        BrokerKey("txbroker.fault.points", "", _fault_points,
                  "fault injection for tests: point[=action],... with points "
                  "before_end_txn, after_prepare_durable, before_markers, after_first_marker, "
                  "before_complete, drop_end_txn_response, after_share_acknowledge_durable and "
                  "actions crash, power_loss, "
                  "delay:MS, drop, expire (docs/fault-injection.md)"),
        BrokerKey("txbroker.faults", "", _faults,
                  "faults installed at start-up, for tests: inline JSON (a fault object or a "
                  "list of them) or the path of a JSON file, e.g. [{\"api\": \"Produce\", "
                  "\"topic\": \"orders\", \"error\": \"NOT_LEADER_OR_FOLLOWER\", "
                  "\"count\": 3}] (docs/fault-injection.md)"),
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
    "process.roles", "inter.broker.listener.name", "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.engine.factory.class",
    "inter.broker.protocol.version",
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


LISTENER_PREFIX = "listener.name."
# Keys a listener may override as listener.name.<listener>.<key> (Kafka's listener prefix).
PER_LISTENER_KEYS = frozenset(k for k in BROKER_KEYS if k.startswith("ssl.")) | {
    "sasl.enabled.mechanisms", "sasl.server.max.receive.size"}
SASL_MECHANISM_PREFIXES = ("plain", "scram-sha-256", "scram-sha-512", "oauthbearer", "gssapi")
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_]+)\.(.+)")


def _parse_listener_key(key: str, value: str, source: str) -> None:
    """listener.name.<listener>.<key> or listener.name.<listener>.<mechanism>.sasl.jaas.config
    (the listener name in lower case, as Kafka requires)."""
    m = _LISTENER_KEY.fullmatch(key)
    if m is None:
        raise UnknownConfigError(key, source)
    rest = m.group(2)
    if rest in PER_LISTENER_KEYS:
        BROKER_KEYS[rest].parse(value)
        return
    mech, _, tail = rest.partition(".")
    if tail == "sasl.jaas.config" and mech in SASL_MECHANISM_PREFIXES:
        return
    if is_single_broker_key(rest) or rest.endswith((".sasl.server.callback.handler.class",
                                                   ".sasl.login.callback.handler.class")):
        return  # JVM-only keys under a listener prefix: stored, unused
    raise UnknownConfigError(key, source)


class UnknownConfigError(ConfigError):
    def __init__(self, key: str, source: str) -> None:
        super().__init__(f"unknown broker config {key!r} ({source})")
        self.key = key
        self.source = source


@dataclass(frozen=True)
class ListenerSpec:
    name: str
    host: str
    port: int
    security_protocol: str
    advertised: tuple[str, int] | None = None

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


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
            elif key.startswith(LISTENER_PREFIX):
                _parse_listener_key(key, value, source)
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
        try:
            self.listener_specs()
        except ConfigError as e:
            problems.append(str(e))
        delay = self.get("connection.failed.authentication.delay.ms")
        idle = self.get("connections.max.idle.ms")
        if not 0 <= delay < idle:
            problems.append(
                f"connection.failed.authentication.delay.ms={delay} "
                f"({self.source('connection.failed.authentication.delay.ms')}) must be at least 0 "
                f"and less than connections.max.idle.ms={idle}")
        queued, frame = self.get("queued.max.request.bytes"), self.get("socket.request.max.bytes")
        if 0 <= queued < frame:
            # As Kafka requires: else one allowed request could never be read.
            problems.append(
                f"queued.max.request.bytes={queued} ({self.source('queued.max.request.bytes')}) "
                f"must be -1 or at least socket.request.max.bytes={frame} "
                f"({self.source('socket.request.max.bytes')})")
        return problems

    # --- convenience accessors ------------------------------------------------------

    def listener_specs(self) -> list[ListenerSpec]:
        """The listeners this broker serves, in the order ``listeners`` gives them
        (controller listeners left out), each with its security protocol and its
        advertised host:port if ``advertised.listeners`` names it."""
        controllers = {n.upper() for n in self.get("controller.listener.names")}
        protocols = self.get("listener.security.protocol.map")
        advertised = {name: (host, port) for name, host, port in
                      (_split_listener(x) for x in _names(self.get("advertised.listeners")))}
        specs = []
        for item in _names(self.get("listeners")):
            name, host, port = _split_listener(item)
            if name in controllers:
                continue
            if name not in protocols:
                raise ConfigError(
                    f"listener {name} ({item}, listeners, {self.source('listeners')}) is not in "
                    f"listener.security.protocol.map ({self.source('listener.security.protocol.map')})"
                    f": add {name}:PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
            adv = advertised.get(name)
            specs.append(ListenerSpec(name, host or "0.0.0.0", 9092 if port is None else port,
                                      protocols[name], adv))
        if not specs:
            raise ConfigError("listeners has no listener to serve (all are controller listeners)")
        return specs

    def for_listener(self, listener: str, key: str):
        """``key``'s value for one listener: listener.name.<listener>.<key> if set, else
        the broker-wide value (Kafka's listener prefix)."""
        prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if prefixed in self.values and key in BROKER_KEYS:
            return BROKER_KEYS[key].parse(self.values[prefixed])
        return self.get(key)

    def listener_source(self, listener: str, key: str) -> str:
        """Which key (and where) for_listener took its value from, for error messages."""
        prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if prefixed in self.values:
            return f"{prefixed}, {self.source(prefixed)}"
        return f"{key}, {self.source(key)}"

    def jaas_config(self, listener: str, mechanism: str) -> tuple[str, str]:
        """The JAAS text for a mechanism on a listener and the key it came from:
        listener.name.<listener>.<mechanism>.sasl.jaas.config, else sasl.jaas.config."""
        prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        if prefixed in self.values:
            return self.values[prefixed], prefixed
        return self.get("sasl.jaas.config"), "sasl.jaas.config"

    @property
    def listener(self) -> tuple[str, int]:
        """The primary listener: the first PLAINTEXT one, else the first one served."""
        specs = self.listener_specs()
        spec = next((s for s in specs if s.security_protocol == "PLAINTEXT"), specs[0])
        return spec.host, spec.port

    @property
    def advertised(self) -> tuple[str, int] | None:
        """The advertised address of the primary listener, if set."""
        specs = self.listener_specs()
        spec = next((s for s in specs if s.security_protocol == "PLAINTEXT"), specs[0])
        return spec.advertised

    @property
    def data_dir(self) -> str:
        return self.raw("log.dirs").split(",")[0].strip()


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


def _with_primary(cfg: BrokerConfig, host: str, port: int) -> str:
    """``listeners`` with the primary listener (config.listener's) moved to host:port
    (--host/--port); the other listeners are kept, controller listeners dropped."""
    try:
        specs = cfg.listener_specs()
    except ConfigError:
        return f"PLAINTEXT://{host}:{port}"
    primary = next((s for s in specs if s.security_protocol == "PLAINTEXT"), specs[0])
    return ",".join(f"{s.name}://{host}:{port}" if s is primary else f"{s.name}://{s.host}:{s.port}"
                    for s in specs)


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
            put("listeners", _with_primary(cfg, host or cur_host, cur_port if port is None else port),
                source)
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
