"""One module per Kafka API. Each defines API_KEY, MIN_VERSION, MAX_VERSION and
``async def handle(ctx, request)`` returning the response message (or None to
send nothing, as for acks=0 produce).

A module is imported when its API is first used (or by the broker's background
preload after "ready"), not at start-up: importing all of them and what they
import costs ~60 ms, and after a crash the start-up time is the outage.
HANDLER_TABLE repeats each module's versions so that ApiVersions can answer
without importing it; tests/unit/broker/test_handlers_table.py checks it against the
modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType

# API key: (module, MIN_VERSION, MAX_VERSION, lowest version parsed). The lowest parsed
# is MIN_PARSED_VERSION where a module has one: Produce advertises v0 as Kafka 4 does
# but refuses v0-2.
HANDLER_TABLE: dict[int, tuple[str, int, int, int]] = {
    0: ("produce", 0, 13, 3),
    1: ("fetch", 4, 12, 4),
    2: ("list_offsets", 1, 7, 1),
    3: ("metadata", 0, 13, 0),
    8: ("offset_commit", 2, 10, 2),
    9: ("offset_fetch", 1, 10, 1),
    10: ("find_coordinator", 0, 6, 0),
    11: ("join_group", 0, 9, 0),
    12: ("heartbeat", 0, 4, 0),
    13: ("leave_group", 0, 5, 0),
    14: ("sync_group", 0, 5, 0),
    15: ("describe_groups", 0, 6, 0),
    16: ("list_groups", 0, 5, 0),
    17: ("sasl_handshake", 0, 1, 0),
    18: ("api_versions", 0, 4, 0),
    19: ("create_topics", 2, 7, 2),
    20: ("delete_topics", 1, 6, 1),
    21: ("delete_records", 0, 2, 0),
    22: ("init_producer_id", 0, 5, 0),
    23: ("offset_for_leader_epoch", 2, 4, 2),
    24: ("add_partitions_to_txn", 0, 5, 0),
    25: ("add_offsets_to_txn", 0, 4, 0),
    26: ("end_txn", 0, 5, 0),
    27: ("write_txn_markers", 1, 2, 1),
    28: ("txn_offset_commit", 0, 5, 0),
    29: ("describe_acls", 1, 3, 1),
    30: ("create_acls", 1, 3, 1),
    31: ("delete_acls", 1, 3, 1),
    32: ("describe_configs", 1, 4, 1),
    33: ("alter_configs", 0, 2, 0),
    35: ("describe_log_dirs", 1, 5, 1),
    36: ("sasl_authenticate", 0, 2, 0),
    37: ("create_partitions", 0, 3, 0),
    42: ("delete_groups", 0, 2, 0),
    44: ("incremental_alter_configs", 0, 1, 0),
    47: ("offset_delete", 0, 0, 0),
    50: ("describe_user_scram_credentials", 0, 0, 0),
    51: ("alter_user_scram_credentials", 0, 0, 0),
    57: ("update_features", 0, 2, 0),
    60: ("describe_cluster", 0, 2, 0),
    61: ("describe_producers", 0, 0, 0),
    65: ("describe_transactions", 0, 0, 0),
    66: ("list_transactions", 0, 2, 0),
    68: ("consumer_group_heartbeat", 0, 1, 0),
    69: ("consumer_group_describe", 0, 1, 0),
    75: ("describe_topic_partitions", 0, 0, 0),
    76: ("share_group_heartbeat", 1, 1, 1),
    77: ("share_group_describe", 1, 1, 1),
    78: ("share_fetch", 1, 2, 1),
    79: ("share_acknowledge", 1, 2, 1),
    88: ("streams_group_heartbeat", 0, 1, 0),
    89: ("streams_group_describe", 0, 1, 0),
    90: ("describe_share_group_offsets", 0, 1, 0),
    91: ("alter_share_group_offsets", 0, 0, 0),
    92: ("delete_share_group_offsets", 0, 0, 0),
}

# APIs advertised only from a finalized feature level on (Kafka advertises the share
# APIs only at share.version >= 1, the streams APIs at streams.version >= 1). Below it
# they are still parsed and answered with UNSUPPORTED_VERSION in the response, as
# Kafka's handlers answer them.
GATED: dict[int, tuple[str, int]] = {
    **{key: ("share.version", 1) for key in (76, 77, 78, 79, 90, 91, 92)},
    **{key: ("streams.version", 1) for key in (88, 89)}}


class _LazyHandlers(Mapping[int, ModuleType]):
    """API key -> handler module, imported on first lookup."""

    def __init__(self) -> None:
        self._modules: dict[int, ModuleType] = {}

    def __getitem__(self, api_key: int) -> ModuleType:
        module = self._modules.get(api_key)
        if module is None:
            name = HANDLER_TABLE[api_key][0]
            module = importlib.import_module(f"{__name__}.{name}")
            self._modules[api_key] = module
        return module

    def __contains__(self, api_key: object) -> bool:
        return api_key in HANDLER_TABLE

    def __iter__(self) -> Iterator[int]:
        return iter(HANDLER_TABLE)

    def __len__(self) -> int:
        return len(HANDLER_TABLE)


HANDLERS: Mapping[int, ModuleType] = _LazyHandlers()


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) of every API this broker can serve, sorted by key
    (ApiVersions leaves out the GATED ones whose feature is off: advertised_versions)."""
    return sorted((key, low, high) for key, (_, low, high, _) in HANDLER_TABLE.items())


def advertised_versions(levels: Mapping[str, int]) -> list[tuple[int, int, int]]:
    """ApiVersions' list at the finalized feature ``levels``: the servable APIs but the
    gated ones whose feature is below its level."""
    return [v for v in supported_versions()
            if v[0] not in GATED or levels.get(GATED[v[0]][0], 0) >= GATED[v[0]][1]]


def accepts(api_key: int, version: int) -> bool:
    entry = HANDLER_TABLE.get(api_key)
    if entry is None:
        return False
    _, _, high, parsed_low = entry
    return parsed_low <= version <= high
