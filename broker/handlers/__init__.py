"""One module per Kafka API. Each defines API_KEY, MIN_VERSION, MAX_VERSION and
``async def handle(ctx, request)`` returning the response message (or None to
send nothing, as for acks=0 produce)."""

from __future__ import annotations

from types import ModuleType

from . import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    update_features,
    write_txn_markers,
)

HANDLER_MODULES: list[ModuleType] = [
    produce,
    fetch,
    list_offsets,
    offset_for_leader_epoch,
    metadata,
    api_versions,
    create_topics,
    delete_topics,
    delete_records,
    describe_configs,
    alter_configs,
    create_partitions,
    incremental_alter_configs,
    describe_cluster,
    describe_log_dirs,
    init_producer_id,
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    describe_groups,
    list_groups,
    delete_groups,
    offset_delete,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    txn_offset_commit,
    write_txn_markers,
    describe_producers,
    describe_transactions,
    list_transactions,
    describe_topic_partitions,
    describe_acls,
    create_acls,
    delete_acls,
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    update_features,
]

HANDLERS: dict[int, ModuleType] = {m.API_KEY: m for m in HANDLER_MODULES}


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) for ApiVersions, sorted by key."""
    return sorted((m.API_KEY, m.MIN_VERSION, m.MAX_VERSION) for m in HANDLER_MODULES)


def accepts(api_key: int, version: int) -> bool:
    module = HANDLERS.get(api_key)
    if module is None:
        return False
    low = getattr(module, "MIN_PARSED_VERSION", module.MIN_VERSION)
    return low <= version <= module.MAX_VERSION
