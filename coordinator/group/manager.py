"""The manager of all groups: registry, timers, durable writes, loading, offsets expiry.

:class:`GroupManager` owns every group of this coordinator (today classic
groups, :class:`~txbroker.coordinator.group.classic.ClassicGroup`) and what
they share: the timer heap, the group records being written, loading from
``__consumer_offsets``, the removal of groups, the offsets retention rule per
group and introspection. It is the ``ctx`` (a
:class:`~txbroker.coordinator.group.classic_rebalance.ClassicContext`) the
classic transitions arm timers and ask for writes through. The request entry
points (JoinGroup, SyncGroup, ...) are added on top of it by
:class:`~txbroker.coordinator.group.state.GroupCoordinatorState` (``state.py``,
which also states how tokens are answered).

How the async shell drives it
-----------------------------
* **Durable writes before acting on them.** ``Effects.persist`` lists group
  metadata records that must be appended to ``__consumer_offsets``. A response
  that depends on a record (the SyncGroup answers that end a rebalance, the
  JoinGroup answer of a static member that replaced its old member id in a
  Stable group) is *not* in the Effects that asks for the write: the state
  machine holds it until the shell calls ``group_persisted(now_ms, write_id,
  error)`` after the append is durable (or failed), and returns it in *that*
  call's Effects. So every response in an Effects can be sent at once, and the
  ``persist`` requests of the same Effects can be written concurrently with
  sending them. The shell appends the records in the order they were requested
  and calls ``group_persisted`` once per :class:`PersistRequest` (the calls
  themselves may come in any order); on failure it passes the error the
  members should see (Kafka maps storage errors: NOT_ENOUGH_REPLICAS /
  REQUEST_TIMED_OUT / UNKNOWN_TOPIC_OR_PARTITION -> COORDINATOR_NOT_AVAILABLE,
  NOT_LEADER_OR_FOLLOWER / KAFKA_STORAGE_ERROR -> NOT_COORDINATOR, MESSAGE_TOO_LARGE
  / RECORD_LIST_TOO_LARGE / INVALID_FETCH_SIZE -> UNKNOWN_SERVER_ERROR).
* **Timers.** ``Effects.wake_at_ms`` (and :meth:`next_wake_ms`) is the next
  absolute time at which ``tick(now_ms)`` must be called: session expiries,
  rebalance (join) timeouts, the initial rebalance delay, pending-sync
  timeouts and MEMBER_ID_REQUIRED expiries. Calls that return a plain ``int``
  (heartbeat, offset-commit validation) can move a deadline, so the shell
  should re-read :meth:`next_wake_ms` after them (or just after every call).
  Only ``tick`` fires timers; a deadline that has passed but not been ticked
  yet has not fired. A timer fires "at" its deadline even when tick() is late.
* **Group records.** Other records the shell writes itself: tombstones for
  groups removed by ``delete_group`` / ``cleanup_groups`` and the offset
  records (see ``offsets.py``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import txbroker.coordinator.group.classic_rebalance as classic_rebalance
from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.classic import ClassicGroup, ClassicWrite, GroupState
from txbroker.coordinator.group.offsets import ExpiryRule
from txbroker.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    decode_group_metadata_value,
    decode_key,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from txbroker.coordinator.group.results import (
    NONE,
    Effects,
    Fx,
    GroupConfig,
    JoinResult,
    PersistRequest,
    SyncResult,
    Token,
)

__all__ = ["GroupManager"]

_S = GroupState
_E = ErrorCode
# Stop a runaway tick (only possible with zero timeouts); the rest fires next tick.
_MAX_TIMERS_PER_TICK = 1_000_000


class GroupManager:
    """All groups of this coordinator, their timers and writes (see the module docstring)."""

    def __init__(self, config: GroupConfig, member_id_factory: Callable[[str], str]) -> None:
        """``member_id_factory(prefix)`` must return a fresh, unique member id.

        The prefix is the group instance id for static members and the client id
        otherwise (Kafka builds ``prefix + "-" + uuid``).
        """
        self.config = config
        self.new_member_id = member_id_factory
        self._groups: dict[str, ClassicGroup] = {}
        self._writes: dict[int, ClassicWrite] = {}
        self._write_ids = itertools.count(1)
        # Timer heap of (deadline, seq, group id, kind, member id); stale entries are
        # skipped lazily (the deadline they name no longer matches the group's).
        self._timers: list[tuple[int, int, str, str, str]] = []
        self._timer_seq = itertools.count()

    # ==========================================================================
    # Timers
    # ==========================================================================

    def push_timer(self, deadline: int, group_id: str, kind: str, member_id: str) -> None:
        heapq.heappush(self._timers, (deadline, next(self._timer_seq), group_id, kind, member_id))

    def tick(self, now_ms: int) -> Effects:
        """Fire every timer due at ``now_ms``, in deadline order.

        Each timer fires "at" its own deadline (timers it arms count from there),
        so the outcome does not depend on how late or how often tick() is called.
        """
        fx = Fx()
        fired = 0
        while self._timers and self._timers[0][0] <= now_ms and fired < _MAX_TIMERS_PER_TICK:
            deadline, _, group_id, kind, member_id = heapq.heappop(self._timers)
            g = self._groups.get(group_id)
            if g is None or not g.timer_is_current(deadline, kind, member_id):
                continue
            fired += 1
            classic_rebalance.fire_timer(self, fx, g, kind, member_id, deadline)
        return self._finish(fx)

    def next_wake_ms(self) -> int | None:
        """When tick() must next be called (absolute ms), or None if no timer is armed."""
        while self._timers:
            deadline, _, group_id, kind, member_id = self._timers[0]
            g = self._groups.get(group_id)
            if g is not None and g.timer_is_current(deadline, kind, member_id):
                return deadline
            heapq.heappop(self._timers)
        return None

    # ==========================================================================
    # Durable writes
    # ==========================================================================

    def persist(self, fx: Fx, g: ClassicGroup, w: ClassicWrite) -> None:
        w.owner = g
        write_id = next(self._write_ids)
        self._writes[write_id] = w
        record = g.record(w.assignment)
        value = encode_group_metadata_value(record)
        assert value is not None
        fx.persist.append(PersistRequest(write_id, g.group_id, encode_group_metadata_key(g.group_id), value, record))

    def group_persisted(self, now_ms: int, write_id: int, error: int = NONE) -> Effects:
        """The shell reports that PersistRequest ``write_id`` is durable (or failed with ``error``)."""
        fx = Fx()
        w = self._writes.pop(write_id, None)
        g = self._groups.get(w.group_id) if w is not None else None
        if w is None or g is None or g is not w.owner:
            return self._finish(fx)
        classic_rebalance.persisted(self, fx, g, w, now_ms, error)
        return self._finish(fx)

    def pending_write_ids(self) -> list[int]:
        return list(self._writes)

    # ==========================================================================
    # Loading from __consumer_offsets
    # ==========================================================================

    def load_group(self, group_id: str, value: GroupMetadataValue | None, now_ms: int) -> Effects:
        """Rebuild a group from its latest record (None = tombstone: no group).

        A group with members comes back Stable, else Empty; members must heartbeat
        within their session timeout from ``now_ms``. Requests parked on a group
        being replaced are answered with load errors.
        """
        fx = Fx()
        old = self._groups.pop(group_id, None)
        if old is not None:
            old.answer_parked_on_reload(fx)
        if value is None:
            return self._finish(fx)
        g = ClassicGroup.from_record(group_id, value)
        self._groups[group_id] = g
        for m in g.members.values():
            classic_rebalance.schedule_heartbeat(self, g, m, now_ms)
        if len(g.members) > self.config.max_size:
            # Give the members a chance to commit, then shed the surplus in the rebalance.
            classic_rebalance.prepare_rebalance(self, fx, g, now_ms)
        return self._finish(fx)

    # ==========================================================================
    # Online migration (migration.py): a group moves to or from the consumer groups
    # ==========================================================================

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def detach_group(self, group_id: str) -> Effects:
        """Upgrade: the group leaves the classic coordinator; parked JoinGroup/SyncGroup
        requests are answered REBALANCE_IN_PROGRESS (they rejoin the consumer group)."""
        fx = Fx()
        g = self._groups.pop(group_id, None)
        if g is not None:
            for m in g.members.values():
                if m.join_token is not None:
                    fx.respond(m.join_token, JoinResult(_E.rebalance_in_progress.value,
                                                        member_id=m.member_id))
                if m.sync_token is not None:
                    fx.respond(m.sync_token, SyncResult(_E.rebalance_in_progress.value))
            g.state = _S.DEAD
        return self._finish(fx)

    def adopt_group(self, group_id: str, value: GroupMetadataValue, now_ms: int) -> Effects:
        """Downgrade: the group (as its record says) joins the classic coordinator and
        rebalances at once, its members with their session timeouts from now."""
        fx = Fx()
        g = ClassicGroup.from_record(group_id, value)
        self._groups[group_id] = g
        for m in g.members.values():
            classic_rebalance.schedule_heartbeat(self, g, m, now_ms)
        classic_rebalance.prepare_rebalance(self, fx, g, now_ms)
        return self._finish(fx)

    def replay(self, key: bytes, value: bytes | None, now_ms: int) -> Effects | None:
        """Load one ``__consumer_offsets`` record; offset records are ignored (None)."""
        k = decode_key(key)
        if not isinstance(k, GroupMetadataKey):
            return None
        return self.load_group(k.group_id, decode_group_metadata_value(value), now_ms)

    def ensure_group(self, group_id: str, now_ms: int | None = None) -> None:
        """Make an Empty group exist (e.g. for groups that only have offsets, on load)."""
        if group_id not in self._groups:
            self._create_group(group_id, now_ms)

    def group_metadata_record(self, group_id: str) -> GroupMetadataValue | None:
        """The group as a record, from its current state (None if unknown)."""
        g = self._groups.get(group_id)
        return g.record() if g is not None else None

    # ==========================================================================
    # Offsets retention, removal of groups
    # ==========================================================================

    def offset_expiry_rule(self, group_id: str) -> ExpiryRule | None:
        """How the group's committed offsets may expire (for OffsetStore.expire)."""
        g = self._groups.get(group_id)
        if g is None:
            # Simple consumer (offsets only): retention counts from each commit.
            return ExpiryRule()
        return g.offset_expiry_rule()

    def cleanup_groups(self, has_offsets: Callable[[str], bool]) -> list[str]:
        """Remove Empty groups without offsets (Kafka's periodic cleanup, after offset
        expiry); returns their ids: the shell writes a group tombstone for each."""
        removed = [g for g in self._groups.values() if g.state is _S.EMPTY and not has_offsets(g.group_id)]
        for g in removed:
            self._remove_group(g)
        return [g.group_id for g in removed]

    def _create_group(self, group_id: str, now: int | None) -> ClassicGroup:
        g = ClassicGroup(group_id=group_id, state_timestamp_ms=now)
        self._groups[group_id] = g
        return g

    def _remove_group(self, g: ClassicGroup) -> None:
        g.state = _S.DEAD
        del self._groups[g.group_id]

    # ==========================================================================
    # Introspection
    # ==========================================================================

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def inspect(self, group_id: str) -> dict[str, Any] | None:
        """Everything about a group as plain data (admin endpoints, tests)."""
        g = self._groups.get(group_id)
        if g is None:
            return None
        return g.inspect()

    def held_tokens(self) -> set[Token]:
        """Tokens whose request is parked (answered by a later Effects)."""
        held: set[Token] = set()
        for g in self._groups.values():
            held.update(g.parked_tokens())
        return held

    def _finish(self, fx: Fx) -> Effects:
        return Effects(fx.responses, fx.persist, self.next_wake_ms(), fx.events)
