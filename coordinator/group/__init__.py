"""Classic consumer-group coordinator: sans-IO state machine, offsets store, records.

``state``   GroupCoordinatorState: JoinGroup/SyncGroup/Heartbeat/LeaveGroup and timers.
``offsets`` OffsetStore: committed and pending transactional offsets.
``records`` versioned msgpack encoding of the ``__consumer_offsets`` records.
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
