"""DescribeConfigs (key 32): topic and broker configs with their sources and, when asked,
their synonyms (KIP-226): every level that sets the value, highest precedence first."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

from txbroker.coordinator.group.group_configs import KEYS, config_text
from txbroker.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build
from txbroker.storage.log_config import TOPIC_CONFIGS

from ..config import BROKER_KEYS, TOPIC_DEFAULT_KEYS
from ..context import RequestContext

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

# Kafka's ConfigSource ids.
CONFIG_SOURCE = {"topic": 1, "dynamic-broker": 2, "broker": 4, "default": 5, "group": 8}
# Kafka's ConfigType ids: BOOLEAN 1, STRING 2, INT 3, SHORT 4, LONG 5, DOUBLE 6, LIST 7.
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}
_TYPES = {
    "cleanup.policy": 7, "compression.type": 2, "message.timestamp.type": 2,
    "min.cleanable.dirty.ratio": 6, "unclean.leader.election.enable": 1, "preallocate": 1,
    "message.downconversion.enable": 1, "max.message.bytes": 3, "index.interval.bytes": 3,
    "segment.bytes": 3, "segment.index.bytes": 3, "min.insync.replicas": 3,
    "listeners": 7, "advertised.listeners": 7, "log.dirs": 7, "auto.create.topics.enable": 1,
    "delete.topic.enable": 1, "node.id": 3, "num.partitions": 3,
    "errors.deadletterqueue.group.enable": 1, "errors.deadletterqueue.topic.name.prefix": 2,
    "errors.deadletterqueue.auto.create.topics.enable": 1,
    **{name: _TYPE_IDS[key.type] for name, key in KEYS.items()},
}
_ZERO = datetime.timedelta(0)
# Broker keys whose default is null in Kafka (the effective default comes from
# log.roll.hours, log.retention.hours, log.flush.scheduler.interval.ms): Kafka lists a
# topic config's broker synonyms from its own key on, so these have no DEFAULT_CONFIG
# synonym unless set.
_NULL_KAFKA_DEFAULTS = frozenset({"log.roll.ms", "log.retention.ms", "log.flush.interval.ms"})


Synonym = tuple[str, str, str]  # name, value, source


def topic_config_entries(logs, topic: str):
    """(name, value, source, doc, synonyms) of every topic config, effective values.
    The synonyms are the topic's override, then the broker key of the same config
    (log.cleanup.policy for cleanup.policy) as set and as defaulted."""
    overrides = logs.topics[topic].configs
    for name, (value, source) in sorted(logs.effective_topic_configs(topic).items()):
        d = TOPIC_CONFIGS[name]
        synonyms: list[Synonym] = []
        if name in overrides:
            synonyms.append((name, overrides[name], "topic"))
        if d.broker_name:
            if name in logs.broker_defaults:
                synonyms.append((d.broker_name, logs.broker_defaults[name], "broker"))
            if d.broker_name not in _NULL_KAFKA_DEFAULTS:
                synonyms.append((d.broker_name, d.default, "default"))
        yield name, value, source, d.doc, synonyms


def broker_config_entries(config):
    for name, key in sorted(BROKER_KEYS.items()):
        source = "broker" if name in config.values else "default"
        yield name, config.raw(name), source, key.doc, _broker_synonyms(
            name, config.raw(name), source, key.default)
    for name, d in sorted(TOPIC_DEFAULT_KEYS.items()):
        value = config.raw(name)
        source = "broker" if name in config.values or value != d.default else "default"
        yield name, value, source, d.doc, _broker_synonyms(name, value, source, d.default)


def group_config_entries(broker, group_id: str):
    """(name, value, source, doc, synonyms) of the group configs, as Kafka 4.4 lists
    them: every key but the internal ones the group has not set (Kafka's isInternal),
    the refused ones with Kafka's defaults. Synonyms: the group's override,
    the broker key as set, then the broker key (the key itself where Kafka has no broker
    key) with Kafka's default."""
    store = broker.groups.group_configs
    overrides = store.get(group_id)
    for name, key in sorted(KEYS.items()):
        if key.internal and name not in overrides:
            continue
        synonyms: list[Synonym] = []
        source = "default"
        broker_key = key.broker_key or _TXBROKER_DEFAULTS.get(name)
        value = (broker.config.values.get(broker_key, key.kafka_default) if key.refused
                 else config_text(store.value(group_id, name)))
        if broker_key is not None and broker_key in broker.config.values:
            source = "broker"
            synonyms.append((broker_key, broker.config.values[broker_key], "broker"))
        synonyms.append((key.broker_key or name, key.kafka_default, "default"))
        if name in overrides:
            value, source = config_text(overrides[name]), "group"
            synonyms.insert(0, (name, value, "group"))
        yield name, value, source, key.doc, synonyms


# Group configs Kafka has no broker key for, whose default txbroker takes from one of its
# own keys (docs/compatibility.md).
_TXBROKER_DEFAULTS = {"share.auto.offset.reset": "txbroker.share.auto.offset.reset",
                      "share.isolation.level": "txbroker.share.isolation.level"}


def _broker_synonyms(name: str, value: str, source: str, default) -> list[Synonym]:
    out: list[Synonym] = [(name, value, "broker")] if source == "broker" else []
    return out + [(name, default, "default")]


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    schema = ctx.schema
    include_docs = getattr(request, "include_documentation", False)
    include_synonyms = getattr(request, "include_synonyms", False)
    results = []
    for res in request.resources:
        error, message, entries = ErrorCode.none, None, []
        read_only = False
        denied = config_access_error(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type,
                                     res.resource_name)
        if denied is not None:
            error = denied
        elif res.resource_type == TOPIC:
            if res.resource_name not in broker.logs.topics:
                error = ErrorCode.unknown_topic_or_partition
                message = f"unknown topic {res.resource_name!r}"
            else:
                entries = list(topic_config_entries(broker.logs, res.resource_name))
        elif res.resource_type == BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                error = ErrorCode.invalid_request
                message = f"unexpected broker id {res.resource_name!r}, expected {broker.node_id}"
            else:
                entries = list(broker_config_entries(broker.config))
                read_only = True  # no dynamic broker configs
        elif res.resource_type == GROUP:
            if not res.resource_name:
                error = ErrorCode.invalid_request
                message = "Group name must not be empty"
            else:
                entries = list(group_config_entries(broker, res.resource_name))
        elif res.resource_type == BROKER_LOGGER:
            entries = []
        else:
            error = ErrorCode.invalid_request
            message = f"unsupported resource type {res.resource_type}"
        if res.configuration_keys is not None:
            wanted = set(res.configuration_keys)
            entries = [e for e in entries if e[0] in wanted]
        configs = tuple(
            build(schema.DescribeConfigsResourceResult, name=name, value=value,
                  read_only=read_only, config_source=CONFIG_SOURCE[source],
                  is_default=source == "default", is_sensitive=False,
                  synonyms=_synonyms(schema, synonyms) if include_synonyms else (),
                  config_type=_TYPES.get(name, 5), documentation=doc if include_docs else None)
            for name, value, source, doc, synonyms in entries
        )
        results.append(build(schema.DescribeConfigsResult, error_code=error, error_message=message,
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=configs))
    return build(ctx.response_type, throttle_time=_ZERO, results=tuple(results))


def _synonyms(schema, synonyms: list[Synonym]) -> tuple:
    if not hasattr(schema, "DescribeConfigsSynonym"):  # v0 has no synonyms
        return ()
    return tuple(build(schema.DescribeConfigsSynonym, name=name, value=value,
                       source=CONFIG_SOURCE[source]) for name, value, source in synonyms)


CLIENT_METRICS = 16
# Which ACL resource guards a config resource, and the error when it is denied (Kafka's
# ConfigHelper and KafkaApis): broker-wide configs are the cluster's.
_CONFIG_GUARDS = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
    BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    BROKER_LOGGER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    CLIENT_METRICS: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
}


def config_access_error(ctx, op: AclOperation, resource_type: int,
                        name: str) -> ErrorCode | None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the resource a config resource maps to:
    None if allowed (or a type no ACL guards), else Kafka's error code."""
    guard = _CONFIG_GUARDS.get(resource_type)
    if guard is None:
        return None
    rtype, error = guard
    if not ctx.authorize(op, rtype, CLUSTER_NAME if rtype == ResourceType.CLUSTER else name):
        return error
    return None


def refuse_alter(resource_type: int) -> None:
    """AlterConfigs' and IncrementalAlterConfigs' answer for a resource other than a
    topic: Kafka's error code, with the reason."""
    if resource_type == BROKER:
        raise KafkaError("broker configs are static here: set them in the properties file, "
                         "environment or command line and restart", ErrorCode.invalid_config)
    raise KafkaError(f"unsupported resource type {resource_type}", ErrorCode.invalid_request)


def alter_configs_response(ctx, request, new_configs: Callable[[object, object], dict[str, str]],
                           log: logging.Logger,
                           new_group_configs: Callable[[dict[str, str], object],
                                                       dict[str, str | None]] | None = None):
    """AlterConfigs' and IncrementalAlterConfigs' answer: each resource checked (ALTER_CONFIGS
    on it), a topic's overrides replaced by ``new_configs(topic info, the resource's
    configs)``, a group's by ``new_group_configs(its overrides as text, the resource's
    configs)`` (each raises KafkaError to refuse), any other resource refused; a refusal
    is logged on ``log`` and answered for that resource alone."""
    broker = ctx.broker
    schema = ctx.schema
    results = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        try:
            denied = config_access_error(ctx, AclOperation.ALTER_CONFIGS, res.resource_type,
                                         res.resource_name)
            if denied is not None:
                raise KafkaError(f"not authorized to alter the configs of {res.resource_name!r}",
                                 denied)
            if res.resource_type == TOPIC:
                info = broker.logs.topics.get(res.resource_name)
                if info is None:
                    raise KafkaError(f"unknown topic {res.resource_name!r}",
                                     ErrorCode.unknown_topic_or_partition)
                broker.logs.alter_topic_configs(res.resource_name,
                                                new_configs(info, res.configs),
                                                validate_only=request.validate_only)
            elif res.resource_type == GROUP and new_group_configs is not None:
                store = broker.groups.group_configs
                current = {k: config_text(v) for k, v in store.get(res.resource_name).items()}
                try:
                    store.replace(res.resource_name, new_group_configs(current, res.configs),
                                  validate_only=request.validate_only)
                except OSError as e:
                    raise KafkaError(f"cannot store the configs of group "
                                     f"{res.resource_name!r}: {e}",
                                     ErrorCode.kafka_storage_error) from e
            else:
                refuse_alter(res.resource_type)
        except KafkaError as e:
            error, message = e.code, str(e)
            log.info("alter configs of %r refused: %s", res.resource_name, e)
        results.append(build(schema.AlterConfigsResourceResponse, error_code=error,
                             error_message=message, resource_type=res.resource_type,
                             resource_name=res.resource_name))
    return build(ctx.response_type, throttle_time=_ZERO, responses=tuple(results))
