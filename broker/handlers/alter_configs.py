"""AlterConfigs (key 33): the legacy, non-incremental form. A topic's overrides become
exactly the configs sent: any override not named is removed (KafkaJS and librdkafka's
``alter_configs`` still use it; the Java Admin of Kafka 4 has only the incremental one)."""

from __future__ import annotations

import logging

from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.storage.log_config import TOPIC_CONFIGS

from ..context import RequestContext
from .describe_configs import alter_configs_response

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)


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


def group_replacement(_current: dict[str, str], configs) -> dict[str, str | None]:
    """A group's new override set: exactly the configs sent (checked by
    GroupConfigStore.replace)."""
    if len({c.name for c in configs}) != len(configs):
        raise KafkaError("Error due to duplicate config keys", ErrorCode.invalid_request)
    return {c.name: c.value for c in configs}


async def handle(ctx: RequestContext, request):
    return alter_configs_response(ctx, request, lambda _info, configs: replacement(configs), log,
                                  group_replacement)
