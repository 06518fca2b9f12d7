"""Group coordinator: sans-IO state machines (classic groups and KIP-848 consumer
groups), offsets store, records.

``state``             GroupCoordinatorState: the request entry points (JoinGroup, SyncGroup,
                      Heartbeat, LeaveGroup, offset checks, Describe/List/DeleteGroups).
``manager``           all groups: registry, timers, durable writes, loading, offsets expiry.
``classic``           one classic group as data: members, protocols, states, transitions.
``classic_join``      JoinGroup of a classic group (static members, MEMBER_ID_REQUIRED).
``classic_rebalance`` a classic group's rebalance cycle, SyncGroup/Heartbeat/LeaveGroup, timers.
``results``           config, answers and effects: plain data of any group type.
``offsets``           OffsetStore: committed and pending transactional offsets.
``records``           versioned msgpack encoding of the ``__consumer_offsets`` records.
``coordinator``       the async shell that drives them.
``consumer_*``        KIP-848 consumer-protocol groups: ``consumer_state`` (all of them:
                      ConsumerGroupHeartbeat, timers, records, replay), ``consumer_group``
                      (one group, reconciliation), ``consumer_assignors``,
                      ``consumer_checks``, ``consumer_regex`` with ``topic_regex``,
                      ``consumer_records`` and ``consumer_coordinator`` (the shell's part).
"""

from txbroker.coordinator.group.offsets import CommittedOffset, ExpiryRule, OffsetStore
from txbroker.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetKey,
    OffsetValue,
    decode_key,
)
from txbroker.coordinator.group.state import (
    Effects,
    GroupConfig,
    GroupCoordinatorState,
    GroupDescription,
    GroupListing,
    GroupState,
    JoinResult,
    LeaveResult,
    MemberDescription,
    PersistRequest,
    SyncResult,
)

__all__ = [
    "CommittedOffset",
    "Effects",
    "ExpiryRule",
    "GroupConfig",
    "GroupCoordinatorState",
    "GroupDescription",
    "GroupListing",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupState",
    "JoinResult",
    "LeaveResult",
    "MemberDescription",
    "MemberMetadata",
    "OffsetKey",
    "OffsetStore",
    "OffsetValue",
    "PersistRequest",
    "SyncResult",
    "decode_key",
]
