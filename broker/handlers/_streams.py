"""Helpers shared by the streams-group handlers (KIP-1071): the feature gate, the
topology checks Kafka's KafkaApis makes before the coordinator, and the conversions
between the wire's task lists and topology and the coordinator's plain data."""

from __future__ import annotations

from collections.abc import Iterable

from txbroker.coordinator.streams.topology import (
    CopartitionGroup,
    StreamsTopology,
    Subtopology,
    TopicInfo,
)
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build
from txbroker.storage.manager import validate_topic_name

from ..features import STREAMS_VERSION

# What Kafka's handlers answer while streams.version is 0 (Errors.UNSUPPORTED_VERSION).
DISABLED = (ErrorCode.unsupported_version, "The version of API is not supported.")
# Kafka's Topic.isInternal: a Streams topology may not read or write them.
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                                   "__share_group_state"})


def streams_enabled(ctx) -> bool:
    """streams.version finalized at 1 (the APIs are advertised only then)."""
    return ctx.broker.features.level(STREAMS_VERSION) >= 1


def _info(t) -> TopicInfo:
    return TopicInfo(t.name, int(t.partitions), int(t.replication_factor),
                     tuple((kv.key, kv.value) for kv in t.topic_configs or ()))


def topology_from(wire) -> StreamsTopology | None:
    if wire is None:
        return None
    return StreamsTopology(int(wire.epoch), tuple(
        Subtopology(
            s.subtopology_id, tuple(s.source_topics or ()), tuple(s.source_topic_regex or ()),
            tuple(_info(t) for t in s.state_changelog_topics or ()),
            tuple(s.repartition_sink_topics or ()),
            tuple(_info(t) for t in s.repartition_source_topics or ()),
            tuple(CopartitionGroup(tuple(int(i) for i in g.source_topics or ()),
                                   tuple(int(i) for i in g.source_topic_regex or ()),
                                   tuple(int(i) for i in g.repartition_source_topics or ()))
                  for g in s.copartition_groups or ()))
        for s in wire.subtopologies or ()))


def copartition_indexes_valid(topology: StreamsTopology) -> bool:
    """Whether every copartition group's indexes name a topic of its subtopology."""
    for s in topology.subtopologies:
        sizes = (len(s.source_topics), len(s.source_topic_regex),
                 len(s.repartition_source_topics))
        for g in s.copartition_groups:
            for indexes, size in zip((g.source_topics, g.source_topic_regex,
                                      g.repartition_source_topics), sizes, strict=True):
                if any(not 0 <= i < size for i in indexes):
                    return False
    return True


def topology_topics(topology: StreamsTopology) -> list[str]:
    """Every topic a topology names, in order, once (what KafkaApis checks)."""
    seen: dict[str, None] = {}
    for s in topology.subtopologies:
        for name in (*s.source_topics, *s.repartition_sink_topics,
                     *(t.name for t in s.repartition_source_topics),
                     *(t.name for t in s.state_changelog_topics)):
            seen[name] = None
    return list(seen)


def topology_problem(topics: list[str]) -> str | None:
    """KafkaApis' checks of a joining topology's topic names (STREAMS_INVALID_TOPOLOGY)."""
    internal = [t for t in topics if t in KAFKA_INTERNAL_TOPICS]
    if internal:
        return (f"Use of Kafka internal topics {', '.join(internal)} in a Kafka Streams "
                "topology is prohibited.")
    invalid = []
    for t in topics:
        try:
            validate_topic_name(t)
        except KafkaError:
            invalid.append(t)
    if invalid:
        return f"Topic names {', '.join(invalid)} are not valid topic names."
    return None


def tasks_from(wire) -> frozenset[tuple[str, int]] | None:
    if wire is None:
        return None
    return frozenset((t.subtopology_id, int(p)) for t in wire for p in t.partitions or ())


def task_ids(schema_cls, tasks: Iterable[tuple[str, int]]) -> tuple:
    """TaskIds by subtopology, sorted (as Kafka's responses list them)."""
    by: dict[str, list[int]] = {}
    for s, p in tasks:
        by.setdefault(s, []).append(p)
    return tuple(build(schema_cls, subtopology_id=s, partitions=tuple(sorted(ps)))
                 for s, ps in sorted(by.items()))
