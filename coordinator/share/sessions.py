"""Share sessions (KIP-932): which share-partitions a member fetches from, and the epoch
its next ShareFetch / ShareAcknowledge must carry. Sans-IO; owned by the share
coordinator (``coordinator.py``), the only caller.

Kafka's ShareSessionCache rules: a session is keyed by (group id, member id); epoch 0
opens one (a ShareFetch only: it carries the full list of partitions; an existing
session of the member is replaced), -1 closes it, any other epoch must be the session's
current one (INVALID_SHARE_SESSION_EPOCH) of a session that exists
(SHARE_SESSION_NOT_FOUND), and then moves it on by one (wrapping to 1). The number of
sessions is bounded (``group.share.max.share.sessions``): a new session past it gets
SHARE_SESSION_LIMIT_REACHED. A session remembers the connection of its last request:
when that connection closes, the session goes (Kafka's ShareSessionCache does the same
through its connection-disconnect listener).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

__all__ = ["ShareSession", "ShareSessions", "INITIAL_EPOCH", "FINAL_EPOCH"]

_E = ErrorCode
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
TopicIdPartition = tuple[uuid.UUID, int]


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # what the next request must carry
    partitions: list[TopicIdPartition] = field(default_factory=list)  # in request order
    connection: Any = None  # the connection of the last request (an opaque identity)


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ShareSessions:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def check(self, group_id: str, member_id: str, epoch: int, *,
              fetch: bool) -> tuple[int, str | None]:
        """Whether a request may use the session (no change made): (error, message)."""
        if epoch == INITIAL_EPOCH:
            if not fetch:
                return (_E.invalid_share_session_epoch.value,
                        "ShareAcknowledge cannot open a share session (epoch 0).")
            if (group_id, member_id) not in self.sessions and \
                    len(self.sessions) >= self.max_sessions:
                return (_E.share_session_limit_reached.value,
                        f"The share session cache is full ({self.max_sessions} sessions).")
            return _E.none.value, None
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return (_E.share_session_not_found.value,
                    f"Share session for member {member_id} of group {group_id} not found.")
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return (_E.invalid_share_session_epoch.value,
                    f"Share session epoch {epoch} does not match the expected {session.epoch}.")
        return _E.none.value, None

    def update(self, group_id: str, member_id: str, epoch: int,
               added: Iterable[TopicIdPartition] = (),
               forgotten: Iterable[TopicIdPartition] = (),
               connection: Any = None) -> ShareSession | None:
        """Apply a request that passed :meth:`check`: open, move on, or close (then the
        closed session is returned, for its partitions)."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            return self.sessions.pop(key, None)
        if epoch == INITIAL_EPOCH:
            session = self.sessions[key] = ShareSession(group_id, member_id, 0)
        else:
            session = self.sessions[key]
        gone = set(forgotten)
        have = set(session.partitions)
        session.partitions = [tp for tp in session.partitions if tp not in gone]
        for tp in added:
            if tp not in have and tp not in gone:
                session.partitions.append(tp)
                have.add(tp)
        session.epoch = _next_epoch(session.epoch)
        if connection is not None:
            session.connection = connection
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """The member left the group: its session goes."""
        return self.sessions.pop((group_id, member_id), None)

    def close_connection(self, connection: Any) -> list[ShareSession]:
        """The sessions whose last request came on ``connection``, removed."""
        keys = [k for k, s in self.sessions.items() if s.connection is connection]
        return [self.sessions.pop(k) for k in keys]

    def close_group(self, group_id: str) -> None:
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]
