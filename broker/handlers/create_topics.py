"""CreateTopics (key 19)."""

from __future__ import annotations

import datetime
import logging
import uuid

from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build

from .describe_configs import CONFIG_SOURCE, topic_config_entries

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
_NO_UUID = uuid.UUID(int=0)


async def handle(ctx, request):
    broker = ctx.broker
    logs = broker.logs
    schema = ctx.schema
    node = broker.node_id
    names = [t.name for t in request.topics]
    results = []
    for topic in request.topics:
        error, message = ErrorCode.none, None
        partitions = topic.num_partitions
        rf = topic.replication_factor
        configs = {c.name: c.value for c in topic.configs}
        try:
            if names.count(topic.name) > 1:
                raise KafkaError(f"topic {topic.name!r} appears more than once in the request",
                                 ErrorCode.invalid_request)
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
                partitions = broker.config.get("num.partitions")
            if rf == -1:
                rf = 1
            if rf != 1:
                raise KafkaError(f"replication factor {rf} is larger than the 1 available broker",
                                 ErrorCode.invalid_replication_factor)
            logs.check_new_topic(topic.name, partitions, configs)
            if not request.validate_only:
                logs.create_topic(topic.name, partitions, configs)
        except KafkaError as e:
            error, message = e.code, str(e)
            log.info("create topic %r refused: %s", topic.name, e)
        ok = error == ErrorCode.none
        info = logs.topics.get(topic.name) if ok else None
        entries = ()
        if ok and info is not None and hasattr(schema, "CreatableTopicConfigs"):  # v5+
            entries = tuple(
                build(schema.CreatableTopicConfigs, name=name, value=value, read_only=False,
                      config_source=CONFIG_SOURCE[source], is_sensitive=False)
                for name, value, source, _doc in topic_config_entries(logs, topic.name)
            )
        results.append(build(
            schema.CreatableTopicResult, name=topic.name,
            topic_id=info.topic_id if info is not None else _NO_UUID,
            error_code=error, error_message=message, topic_config_error_code=ErrorCode.none,
            num_partitions=partitions if ok else -1, replication_factor=rf if ok else -1,
            configs=entries if ok else None,
        ))
    return build(ctx.response_type, throttle_time=_ZERO, topics=tuple(results))
