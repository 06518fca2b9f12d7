"""A streams group's topology (KIP-1071) and its configuration against the topics that
exist: plain data in, plain data out, no I/O.

A Kafka Streams client describes its topology in the joining StreamsGroupHeartbeat:
subtopologies, each with its source topics, the repartition topics it writes to (sink)
and reads from (source, maybe with a fixed partition count), its state changelog topics
and its copartition groups (indexes into its own topic lists). The group coordinator
then, as Kafka 4.4's ``InternalTopicManager.configureTopics`` does:

1. checks that every source topic exists (else status MISSING_SOURCE_TOPICS);
2. derives the partition count of every repartition topic without a fixed count: the
   largest partition count among the source topics of the subtopologies writing to it,
   iterated until nothing changes (a topology that cannot be resolved is
   STREAMS_INVALID_TOPOLOGY, an error, not a status);
3. enforces copartitioning: external topics of a copartition group must have equal
   partition counts, and its repartition topics take that count (else
   INCORRECTLY_PARTITIONED_TOPICS);
4. gives each changelog topic the partition count of its subtopology (its number of
   tasks: the largest partition count of its source and repartition source topics);
5. lists the internal topics (repartition + changelog) that do not exist yet, to be
   created (status MISSING_INTERNAL_TOPICS), and checks the ones that exist have the
   partition count decided (else INCORRECTLY_PARTITIONED_TOPICS).

The topics are passed in as a :data:`TopicImage` (name -> partition count).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "STALE_TOPOLOGY", "MISSING_SOURCE_TOPICS", "INCORRECTLY_PARTITIONED_TOPICS",
    "MISSING_INTERNAL_TOPICS", "SHUTDOWN_APPLICATION", "ASSIGNMENT_DELAYED",
    "MISSING_CLIENT_TAGS", "REPARTITION_TOPIC_DEFAULTS", "CHANGELOG_TOPIC_DEFAULTS",
    "TopicImage", "TopicInfo", "CopartitionGroup", "Subtopology", "StreamsTopology",
    "InternalTopic", "ConfiguredTopology", "InvalidTopologyError", "Status",
    "configure_topics", "metadata_hash", "validate_request_topology", "regex_unsupported",
]

# StreamsGroupHeartbeatResponse.json, Status.StatusCode (int8).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5
MISSING_CLIENT_TAGS = 6  # only to StreamsGroupHeartbeat v1+ (KAFKA-20744)

# What Kafka Streams puts under the user's configs of its internal topics
# (RepartitionTopicConfig / UnwindowedUnversionedChangelogTopicConfig). A Streams client
# sends them itself; they are applied below a client's own configs only so that a
# client that leaves them out still gets delete / compacted topics.
REPARTITION_TOPIC_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete", "segment.bytes": "52428800", "retention.ms": "-1",
    "message.timestamp.type": "CreateTime"}
CHANGELOG_TOPIC_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}

TopicImage = Mapping[str, int]  # topic name -> partition count


@dataclass(frozen=True)
class TopicInfo:
    """An internal topic as the client describes it. ``partitions`` 0: not fixed (always
    0 for a changelog topic); ``replication_factor`` 0: the broker's default."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CopartitionGroup:
    """Indexes into the subtopology's ``source_topics``, ``source_topic_regex`` and
    ``repartition_source_topics``."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()

    def input_topics(self) -> list[str]:
        return list(self.source_topics) + [t.name for t in self.repartition_source_topics]

    def is_stateful(self) -> bool:
        return bool(self.state_changelog_topics)


@dataclass(frozen=True)
class StreamsTopology:
    """The StreamsGroupTopologyValue record: the epoch and the subtopologies in the order
    the client sent them (equality compares them as the record does)."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def by_id(self) -> dict[str, Subtopology]:
        return {s.subtopology_id: s for s in self.subtopologies}

    def required_topics(self) -> set[str]:
        out: set[str] = set()
        for s in self.subtopologies:
            out.update(s.input_topics())
            out.update(t.name for t in s.state_changelog_topics)
        return out


@dataclass(frozen=True)
class InternalTopic:
    """An internal topic to create (CreatableTopic): replication factor -1 is the default."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Status:
    code: int
    detail: str


@dataclass(frozen=True)
class ConfiguredTopology:
    """The outcome of :func:`configure_topics`. ``tasks`` (subtopology id -> number of
    tasks) is None when the topics are not usable; ``status`` is None when the topology
    is ready (Kafka's ``isReady``: no topic configuration problem)."""

    topology_epoch: int
    metadata_hash: int
    tasks: Mapping[str, int] | None
    stateful: frozenset[str] = frozenset()
    internal_topics_to_create: tuple[InternalTopic, ...] = ()
    status: Status | None = None

    @property
    def is_ready(self) -> bool:
        return self.status is None and self.tasks is not None

    def all_tasks(self) -> list[tuple[str, int]]:
        return [(s, p) for s, n in sorted((self.tasks or {}).items()) for p in range(n)]


class InvalidTopologyError(ValueError):
    """The topology cannot be configured at all: STREAMS_INVALID_TOPOLOGY (130)."""


class _TopicConfigurationError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.status = Status(code, detail)


def _summarize(topics: Iterable[str]) -> str:
    """Kafka's summarizeTopics: at most three names, then a count of the rest."""
    topics = list(topics)
    if not topics:
        return "<none>"
    more = f" and {len(topics) - 3} additional topics" if len(topics) > 3 else ""
    return ", ".join(topics[:3]) + more


def metadata_hash(topology: StreamsTopology | None, topics: TopicImage) -> int:
    """A signed 64-bit digest of the partition counts of the topology's topics: when it
    changes, the topology is configured again and a new assignment computed. (Kafka
    hashes topic ids, names, partitions and racks with its own scheme; only equality
    matters here.)"""
    if topology is None:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(topology.required_topics()):
        h.update(f"{name}\0{topics.get(name, -1)}\0".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


def _repartition_counts(subs: tuple[Subtopology, ...], count) -> dict[str, int]:
    """RepartitionTopics: fixed counts, then each sink topic gets the largest partition
    count of its writer's inputs known when the writer is visited; Kafka visits every
    subtopology in order, pass after pass, until every sink has a count. The passes are
    replayed here in their order without visiting a subtopology that cannot progress: a
    writer waits until one of its repartition source topics gets a count, then is visited
    where its pass would visit it next (linear in the topology, where the passes are
    quadratic for a chain of subtopologies listed last first)."""
    counts = {t.name: t.partitions for s in subs for t in s.repartition_source_topics
              if t.partitions}
    readers: dict[str, list[int]] = {}
    for i, s in enumerate(subs):
        for t in s.repartition_source_topics:
            readers.setdefault(t.name, []).append(i)
    due = [(1, i) for i in range(len(subs))]  # (pass, position): a heap, in order already
    scheduled = set(range(len(subs)))
    waiting: set[int] = set()
    while due:
        rnd, i = heapq.heappop(due)
        scheduled.discard(i)
        s = subs[i]
        for sink in s.repartition_sink_topics:
            if sink in counts:
                continue
            candidates = [counts[t.name] for t in s.repartition_source_topics
                          if t.name in counts]
            candidates += [n for n in map(count, s.source_topics) if n is not None]
            if not candidates:
                waiting.add(i)
                continue
            counts[sink] = max(candidates)
            waiting.discard(i)
            for j in readers.get(sink, ()):
                if j in waiting and j not in scheduled:
                    scheduled.add(j)
                    heapq.heappush(due, (rnd if j > i else rnd + 1, j))
    if any(sink not in counts for i in waiting for sink in subs[i].repartition_sink_topics):
        raise InvalidTopologyError(
            "Failed to compute number of partitions for all repartition topics. "
            "There may be loops in the topology that cannot be resolved.")
    for s in subs:
        if any(t.name not in counts for t in s.repartition_source_topics):
            raise InvalidTopologyError(
                "Failed to compute number of partitions for all repartition topics, because "
                "a repartition source topic is never used as a sink topic.")
    return counts


def _enforce_copartitioning(subs: tuple[Subtopology, ...], count, decided: dict[str, int]) -> None:
    """CopartitionedTopicsEnforcer, group by group."""
    fixed = {t.name for s in subs for t in s.repartition_source_topics if t.partitions}
    flexible = {t.name for s in subs for t in s.repartition_source_topics if not t.partitions}
    # A fixed topic's count never changes below (a change raises): the check of all of
    # them, made once rather than per copartition group.
    fixed_count: list[tuple[int | None, bool]] = []
    for s in subs:
        for g in s.copartition_groups:
            group = {s.source_topics[i] for i in g.source_topics} | {
                s.repartition_source_topics[i].name for i in g.repartition_source_topics}
            if not group:
                continue
            repart = {t: count(t) for t in group if t in fixed or t in flexible}
            external = {t: count(t) for t in group if t not in repart}
            if set(repart) == group:
                if fixed:
                    # Kafka validates every fixed repartition topic of the topology here.
                    if not fixed_count:
                        first = count(min(fixed))
                        fixed_count.append((first, all(count(t) == first for t in fixed)))
                    first, uniform = fixed_count[0]
                    if not uniform:
                        raise _TopicConfigurationError(
                            INCORRECTLY_PARTITIONED_TOPICS,
                            f"Following topics do not have the same number of partitions: "
                            f"[{_sorted_map(repart)}]")
                    n = first
                else:
                    n = max(repart.values(), default=0)
                    if n == 0:
                        raise InvalidTopologyError(
                            "All topics in the copartition group had undefined partition "
                            f"number: {sorted(repart)}")
            else:
                values = set(external.values())
                if len(values) > 1:
                    raise _TopicConfigurationError(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Following topics do not have the same number of partitions: "
                        f"[{_sorted_map(external)}]")
                n = values.pop()
            for topic, have in sorted(repart.items()):
                decided[topic] = n
                if topic in fixed and have != n:
                    raise _TopicConfigurationError(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Number of partitions [{have}] of repartition topic [{topic}] "
                        f"doesn't match number of partitions [{n}] of the source topic.")


def _sorted_map(m: Mapping[str, int | None]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(m.items())) + "}"


def _configs(info: TopicInfo, defaults: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    merged = dict(defaults)
    merged.update(info.configs)
    return tuple(sorted(merged.items()))


def configure_topics(topology: StreamsTopology, topics: TopicImage) -> ConfiguredTopology:
    """Configure ``topology`` against ``topics``; raises InvalidTopologyError for a
    topology no topic layout can satisfy (Kafka answers the heartbeat with
    STREAMS_INVALID_TOPOLOGY and writes nothing)."""
    subs = topology.subtopologies
    mhash = metadata_hash(topology, topics)
    try:
        missing = sorted({t for s in subs for t in s.source_topics if t not in topics})
        if missing:
            raise _TopicConfigurationError(
                MISSING_SOURCE_TOPICS, f"Source topics {_summarize(missing)} are missing.")
        decided: dict[str, int] = {}

        def count(topic: str) -> int | None:
            return topics[topic] if topic in topics else decided.get(topic)

        decided.update(_repartition_counts(subs, count))
        _enforce_copartitioning(subs, count, decided)
        tasks: dict[str, int] = {}
        for s in subs:
            inputs = [count(t) for t in s.input_topics()]
            if not inputs:
                raise InvalidTopologyError(f"No source topics found for subtopology {s.subtopology_id}")
            tasks[s.subtopology_id] = max(n or 0 for n in inputs)
            for t in s.state_changelog_topics:
                decided[t.name] = tasks[s.subtopology_id]
        wanted: dict[str, InternalTopic] = {}
        for s in subs:
            for t in s.repartition_source_topics:
                wanted[t.name] = InternalTopic(t.name, t.partitions or decided[t.name],
                                               t.replication_factor or -1,
                                               _configs(t, REPARTITION_TOPIC_DEFAULTS))
            for t in s.state_changelog_topics:
                wanted[t.name] = InternalTopic(t.name, decided[t.name], t.replication_factor or -1,
                                               _configs(t, CHANGELOG_TOPIC_DEFAULTS))
        for name in sorted(topology.required_topics()):
            expected = wanted.pop(name, None) if name in topics else None
            if expected is not None and topics[name] != expected.partitions:
                raise _TopicConfigurationError(
                    INCORRECTLY_PARTITIONED_TOPICS,
                    f"Existing topic {name} has different number of partitions: expected "
                    f"{expected.partitions}, found {topics[name]}")
    except _TopicConfigurationError as exc:
        return ConfiguredTopology(topology.epoch, mhash, None, status=exc.status)
    stateful = frozenset(s.subtopology_id for s in subs if s.is_stateful())
    to_create = tuple(wanted[n] for n in sorted(wanted))
    status = None
    if to_create:
        status = Status(MISSING_INTERNAL_TOPICS,
                        f"Internal topics are missing: {_summarize(t.name for t in to_create)}")
    return ConfiguredTopology(topology.epoch, mhash, tasks, stateful, to_create, status)


def validate_request_topology(topology: StreamsTopology) -> str | None:
    """GroupCoordinatorService's checks of a joining heartbeat's topology: the error
    message, or None. Regexes are INVALID_REQUEST ("not supported yet") in Kafka 4.4; a
    changelog topic with a partition count is STREAMS_INVALID_TOPOLOGY (the caller
    tells them apart with :func:`regex_unsupported`)."""
    for s in topology.subtopologies:
        for t in s.state_changelog_topics:
            if t.partitions != 0:
                return (f"Changelog topic {t.name} must have an undefined partition count, "
                        f"but it is set to {t.partitions}.")
    return None


def regex_unsupported(topology: StreamsTopology) -> bool:
    return any(s.source_topic_regex for s in topology.subtopologies)

