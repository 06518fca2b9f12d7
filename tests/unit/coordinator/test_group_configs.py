"""GroupConfigStore: group configs survive a restart (the file in the data directory),
and a refused or validate-only change stores nothing."""

from __future__ import annotations

import pytest
from txbroker.coordinator.group.group_configs import (
    HEARTBEAT_INTERVAL,
    SESSION_TIMEOUT,
    GroupConfigStore,
)
from txbroker.protocol.errors import ErrorCode, KafkaError

LIMITS = {SESSION_TIMEOUT: (45000, 45000, 60000), HEARTBEAT_INTERVAL: (5000, 2000, 15000)}


def test_overrides_survive_a_restart(tmp_path):
    store = GroupConfigStore(str(tmp_path), LIMITS)
    assert store.replace("g", {SESSION_TIMEOUT: "50000", HEARTBEAT_INTERVAL: " 3000 "}) == {
        SESSION_TIMEOUT: 50000, HEARTBEAT_INTERVAL: 3000}
    store.replace("h", {HEARTBEAT_INTERVAL: "4000"})
    store.replace("h", {})  # every override deleted: the group is gone from the file
    again = GroupConfigStore(str(tmp_path), LIMITS)
    assert again.overrides == {"g": {SESSION_TIMEOUT: 50000, HEARTBEAT_INTERVAL: 3000}}
    assert again.effective("g", SESSION_TIMEOUT) == 50000
    assert again.effective("h", SESSION_TIMEOUT) == 45000


@pytest.mark.parametrize("new, code", [
    ({SESSION_TIMEOUT: "70000"}, ErrorCode.invalid_config),
    ({"share.session.timeout.ms": "50000"}, ErrorCode.invalid_config),
    ({SESSION_TIMEOUT: None}, ErrorCode.invalid_request),
    ({HEARTBEAT_INTERVAL: "15000", SESSION_TIMEOUT: "45000"}, ErrorCode.none),
])
def test_refused_and_validate_only_store_nothing(tmp_path, new, code):
    store = GroupConfigStore(str(tmp_path), LIMITS)
    store.replace("g", {HEARTBEAT_INTERVAL: "3000"})
    if code == ErrorCode.none:
        store.replace("g", new, validate_only=True)
    else:
        with pytest.raises(KafkaError) as e:
            store.replace("g", new)
        assert e.value.code == code
    assert GroupConfigStore(str(tmp_path), LIMITS).overrides == {"g": {HEARTBEAT_INTERVAL: 3000}}
    assert store.overrides == {"g": {HEARTBEAT_INTERVAL: 3000}}
