"""AlterConfigs (key 33): the legacy, non-incremental form. A topic's overrides become
exactly the configs sent: any override not named is removed (KafkaJS and librdkafka's
``alter_configs`` still use it; the Java Admin of Kafka 4 has only the incremental one)."""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build
from txbroker.storage.log_config import TOPIC_CONFIGS

from .describe_configs import TOPIC, config_access_error, refuse_alter

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


def replacement(configs) -> dict[str, str]:
    """The new override set, refused whole on an unknown or repeated name."""
    new: dict[str, str] = {}
    for c in configs:
        if c.name in new:
            raise KafkaError(f"config {c.name!r} appears more than once", ErrorCode.invalid_config)
        if c.name not in TOPIC_CONFIGS:
            raise KafkaError(f"unknown topic config {c.name!r}", ErrorCode.invalid_config)
        if c.value is None:
            raise KafkaError(f"null value for {c.name!r}", ErrorCode.invalid_config)
        new[c.name] = c.value
    return new


async def handle(ctx, request):
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
                if res.resource_name not in broker.logs.topics:
                    raise KafkaError(f"unknown topic {res.resource_name!r}",
                                     ErrorCode.unknown_topic_or_partition)
                broker.logs.alter_topic_configs(res.resource_name, replacement(res.configs),
                                                validate_only=request.validate_only)
            else:
                refuse_alter(res.resource_type)
        except KafkaError as e:
            error, message = e.code, str(e)
            log.info("alter configs of %r refused: %s", res.resource_name, e)
        results.append(build(schema.AlterConfigsResourceResponse, error_code=error,
                             error_message=message, resource_type=res.resource_type,
                             resource_name=res.resource_name))
    return build(ctx.response_type, throttle_time=_ZERO, responses=tuple(results))
