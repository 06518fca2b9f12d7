"""IncrementalAlterConfigs (key 44): SET / DELETE / APPEND / SUBTRACT topic configs."""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build
from txbroker.storage.log_config import TOPIC_CONFIGS

from .describe_configs import TOPIC, config_access_error, refuse_alter

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = {"cleanup.policy"}

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


def _apply(current: dict[str, str], ops) -> dict[str, str]:
    new = dict(current)
    names = [op.name for op in ops]
    for op in ops:
        if names.count(op.name) > 1:
            raise KafkaError(f"config {op.name!r} appears more than once", ErrorCode.invalid_config)
        if op.name not in TOPIC_CONFIGS:
            raise KafkaError(f"unknown topic config {op.name!r}", ErrorCode.invalid_config)
        if op.config_operation == SET:
            if op.value is None:
                raise KafkaError(f"null value for {op.name!r}", ErrorCode.invalid_config)
            new[op.name] = op.value
        elif op.config_operation == DELETE:
            new.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            if op.name not in LIST_CONFIGS:
                raise KafkaError(f"config {op.name!r} is not a list; APPEND/SUBTRACT not allowed",
                                 ErrorCode.invalid_config)
            base = new.get(op.name, TOPIC_CONFIGS[op.name].default)
            items = [x for x in base.split(",") if x]
            values = [x.strip() for x in (op.value or "").split(",") if x.strip()]
            if op.config_operation == APPEND:
                items += [v for v in values if v not in items]
            else:
                items = [x for x in items if x not in values]
            new[op.name] = ",".join(items)
        else:
            raise KafkaError(f"unknown config operation {op.config_operation}",
                             ErrorCode.invalid_request)
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
                info = broker.logs.topics.get(res.resource_name)
                if info is None:
                    raise KafkaError(f"unknown topic {res.resource_name!r}",
                                     ErrorCode.unknown_topic_or_partition)
                new = _apply(info.configs, res.configs)
                broker.logs.alter_topic_configs(res.resource_name, new,
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
