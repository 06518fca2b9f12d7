"""Regular-expression subscriptions of consumer-protocol groups (KIP-848).

A member may subscribe with ``subscribed_topic_regex`` (RE2 syntax, matched against the
whole topic name) instead of, or beside, topic names. As in Kafka, a regex is compiled
when a member brings it (a bad one is INVALID_REGULAR_EXPRESSION and the member is not
admitted), resolved against the topics when it is new to the group, and every resolved
regex of a group is refreshed at most every :data:`REFRESH_INTERVAL_MS` (Kafka's
REGEX_BATCH_REFRESH_INTERVAL_MS) so that new topics are picked up; a resolution that
changes bumps the group epoch. Resolutions are kept in ``__consumer_offsets`` as
ConsumerGroupRegularExpression records (type 16), so a restart does not need to resolve
again. Matching is linear-time (``topic_regex.py``) and compiled patterns are cached.
"""

from __future__ import annotations

from collections.abc import Iterable

from txbroker.coordinator.group import consumer_records as cr
from txbroker.coordinator.group.consumer_group import ConsumerGroup
from txbroker.coordinator.group.consumer_records import ConsumerRecordKey
from txbroker.coordinator.group.topic_regex import RegexError, TopicRegex

__all__ = ["REFRESH_INTERVAL_MS", "RegexCache", "refresh"]

REFRESH_INTERVAL_MS = 10_000
_CACHE_SIZE = 1024


class RegexCache:
    """Compiled patterns by text (bounded: the oldest go first)."""

    def __init__(self) -> None:
        self._compiled: dict[str, TopicRegex] = {}

    def get(self, pattern: str) -> TopicRegex:
        """The compiled pattern; raises RegexError (INVALID_REGULAR_EXPRESSION)."""
        found = self._compiled.pop(pattern, None)
        if found is None:
            found = TopicRegex(pattern)
            if len(self._compiled) >= _CACHE_SIZE:
                del self._compiled[next(iter(self._compiled))]
        self._compiled[pattern] = found
        return found


def check(cache: RegexCache, pattern: str) -> str | None:
    """Kafka's message for a pattern that does not compile, else None."""
    try:
        cache.get(pattern)
    except RegexError as e:
        return f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}."
    return None


def refresh(g: ConsumerGroup, cache: RegexCache, topics: Iterable[str], now_ms: int
            ) -> tuple[list[tuple[bytes, bytes | None]], bool]:
    """Resolve the group's regexes if one is new or the last refresh is older than the
    interval; forget those no member uses. Returns (records, whether a resolution
    changed)."""
    used = {m.subscription.subscribed_topic_regex for m in g.members.values()} - {None}
    records = []
    for gone in sorted(set(g.resolved) - used):
        del g.resolved[gone]
        records.append(_record(g.group_id, gone, None))
    due = now_ms >= g.regex_refreshed_ms + REFRESH_INTERVAL_MS
    if not used or not (due or used - set(g.resolved)):
        return records, False
    compiled = []
    for pattern in sorted(used):
        try:
            compiled.append((pattern, cache.get(pattern)))
        except RegexError:
            continue  # refused when a member brought it; not expected here
    matched: dict[str, set[str]] = {p: set() for p, _ in compiled}
    for name in topics:
        for pattern, regex in compiled:
            if regex.matches(name):
                matched[pattern].add(name)
    changed = False
    for pattern, names in matched.items():
        resolved = frozenset(names)
        if g.resolved.get(pattern) != resolved:
            changed = True
        g.resolved[pattern] = resolved
        records.append(_record(g.group_id, pattern, (resolved, now_ms)))
    g.regex_refreshed_ms = now_ms
    return records, changed


def _record(group_id: str, pattern: str, value) -> tuple[bytes, bytes | None]:
    kind = cr.REGULAR_EXPRESSION
    return cr.encode_key(ConsumerRecordKey(kind, group_id, pattern)), cr.encode_value(kind, value)
