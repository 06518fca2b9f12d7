"""IncrementalAlterConfigs (key 44): SET / DELETE / APPEND / SUBTRACT topic configs, and
SET / DELETE of group configs (coordinator/group/group_configs.py)."""

from __future__ import annotations

import logging

from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.storage.log_config import TOPIC_CONFIGS

from ..context import RequestContext
from .describe_configs import alter_configs_response

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = {"cleanup.policy"}

log = logging.getLogger(__name__)


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


def group_configs_after(current: dict[str, str], ops) -> dict[str, str | None]:
    """A group's override set after ``ops``, refused in Kafka's order (duplicates, a null
    SET, APPEND/SUBTRACT, none of them list-typed); the names and values are checked
    by GroupConfigStore.replace. DELETE takes any name, as on Kafka."""
    if len({op.name for op in ops}) != len(ops):
        raise KafkaError("Error due to duplicate config keys", ErrorCode.invalid_request)
    new: dict[str, str | None] = dict(current)
    for op in ops:
        if op.config_operation == SET:
            if op.value is None:
                raise KafkaError(f"Null value not supported for : {op.name}",
                                 ErrorCode.invalid_request)
            new[op.name] = op.value
        elif op.config_operation == DELETE:
            new.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            verb = "APPEND" if op.config_operation == APPEND else "SUBTRACT"
            raise KafkaError(f"Can't {verb} to key {op.name} because its type is not LIST.",
                             ErrorCode.invalid_config)
        else:
            raise KafkaError(f"unknown config operation {op.config_operation}",
                             ErrorCode.invalid_request)
    return new


async def handle(ctx: RequestContext, request):
    return alter_configs_response(ctx, request, lambda info, ops: _apply(info.configs, ops), log,
                                  group_configs_after)
