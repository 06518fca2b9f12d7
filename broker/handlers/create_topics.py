"""CreateTopics (key 19)."""

from __future__ import annotations

import datetime
import logging
import uuid

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build

from ..context import RequestContext
from .describe_configs import CONFIG_SOURCE, topic_config_entries

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
_NO_UUID = uuid.UUID(int=0)
# Kafka's controller refuses a whole CreateTopics past its per-request bound with this.
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


def requested_partitions(request, default_partitions: int) -> int:
    """Partitions a CreateTopics request asks for, counted before any validation as
    Kafka's controller counts them: -1 is num.partitions, assignments count one each,
    other counts below 1 nothing (they are refused on their own)."""
    total = 0
    for topic in request.topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    logs = broker.logs
    schema = ctx.schema
    node = broker.node_id
    names = [t.name for t in request.topics]
    default_partitions = broker.config.get("num.partitions")
    per_request = broker.config.get("txbroker.max.partitions.per.request")
    # Checked first, before names or anything else, and for the whole request (Kafka).
    refuse_all = 0 <= per_request < requested_partitions(request, default_partitions)
    if refuse_all:
        log.info("CreateTopics of %d topic(s) refused: more than %d partitions", len(names),
                 per_request)
    # Kafka's controller: CREATE on the cluster, or else on each topic; the configs of a
    # created topic are returned only with DESCRIBE_CONFIGS on it.
    creatable = None
    if broker.authorizer is not None and not ctx.authorize_cluster(AclOperation.CREATE,
                                                                   log_denied=False):
        creatable = ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, names)
    describable = ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names,
                                 log_denied=False)
    outcome: dict[int, tuple[ErrorCode, str | None, int, int]] = {}
    specs: list[tuple[int, str, int, dict[str, str]]] = []
    for i, topic in enumerate(request.topics):
        partitions = topic.num_partitions
        rf = topic.replication_factor
        configs = {c.name: c.value for c in topic.configs}
        try:
            if refuse_all:
                raise KafkaError(TOO_MANY_PARTITIONS, ErrorCode.policy_violation)
            if names.count(topic.name) > 1:
                raise KafkaError(f"topic {topic.name!r} appears more than once in the request",
                                 ErrorCode.invalid_request)
            if creatable is not None and topic.name not in creatable:
                raise KafkaError("Authorization failed.", ErrorCode.topic_authorization_failed)
            if topic.assignments:
                if partitions != -1 or rf != -1:
                    raise KafkaError("both assignments and partitions/replication factor given",
                                     ErrorCode.invalid_request)
                for a in topic.assignments:
                    if tuple(a.broker_ids) != (node,):
                        raise KafkaError(
                            f"replica assignment {list(a.broker_ids)} for partition "
                            f"{a.partition_index} must be exactly [{node}] on a single broker",
                            ErrorCode.invalid_replica_assignment)
                partitions = len(topic.assignments)
            if partitions == -1:
                partitions = default_partitions
            if rf == -1:
                rf = 1
            if rf != 1:
                raise KafkaError(f"replication factor {rf} is larger than the 1 available broker",
                                 ErrorCode.invalid_replication_factor)
        except KafkaError as e:
            outcome[i] = (e.code, str(e), partitions, rf)
            if not refuse_all:
                log.info("create topic %r refused: %s", topic.name, e)
            continue
        outcome[i] = (ErrorCode.none, None, partitions, rf)
        specs.append((i, topic.name, partitions, configs))
    if specs:
        created = await logs.create_topics(
            [(name, partitions, configs) for _i, name, partitions, configs in specs],
            max_partitions=broker.config.get("txbroker.max.partitions"),
            validate_only=request.validate_only)
        for i, name, partitions, _configs in specs:
            result = created[name]
            if isinstance(result, KafkaError):
                outcome[i] = (result.code, str(result), partitions, outcome[i][3])
                log.info("create topic %r refused: %s", name, result)
    results = []
    for i, topic in enumerate(request.topics):
        error, message, partitions, rf = outcome[i]
        ok = error == ErrorCode.none
        info = logs.topics.get(topic.name) if ok and not request.validate_only else None
        entries = ()
        config_error = ErrorCode.none
        if ok and topic.name not in describable:
            config_error = ErrorCode.topic_authorization_failed
        elif ok and info is not None and hasattr(schema, "CreatableTopicConfigs"):  # v5+
            entries = tuple(
                build(schema.CreatableTopicConfigs, name=name, value=value, read_only=False,
                      config_source=CONFIG_SOURCE[source], is_sensitive=False)
                for name, value, source, _doc, _synonyms in topic_config_entries(logs, topic.name)
            )
        results.append(build(
            schema.CreatableTopicResult, name=topic.name,
            topic_id=info.topic_id if info is not None else _NO_UUID,
            error_code=error, error_message=message, topic_config_error_code=config_error,
            num_partitions=partitions if ok else -1, replication_factor=rf if ok else -1,
            configs=entries if ok else None,
        ))
    return build(ctx.response_type, throttle_time=_ZERO, topics=tuple(results))
