"""Configuring a streams topology against the topics (Kafka 4.4's InternalTopicManager):
repartition partition counts, copartitioning, changelog counts, internal topics to
create, and the status codes / errors Kafka reports."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from txbroker.coordinator.streams.topology import (
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    CopartitionGroup,
    InvalidTopologyError,
    StreamsTopology,
    Subtopology,
    TopicInfo,
    configure_topics,
    metadata_hash,
    regex_unsupported,
    validate_request_topology,
)


def _join_topology(fixed: int = 0) -> StreamsTopology:
    """Two source subtopologies repartition into a join subtopology that copartitions
    both repartition topics and keeps a store."""
    return StreamsTopology(3, (
        Subtopology("0", ("left",), repartition_sink_topics=("rep-l",)),
        Subtopology("1", ("right",), repartition_sink_topics=("rep-r",)),
        Subtopology("2", (), state_changelog_topics=(TopicInfo("store-changelog", 0, 3),),
                    repartition_source_topics=(TopicInfo("rep-l", fixed), TopicInfo("rep-r")),
                    copartition_groups=(CopartitionGroup((), (), (0, 1)),)),
    ))


def test_repartition_topics_take_the_largest_writer_and_copartition() -> None:
    c = configure_topics(_join_topology(), {"left": 4, "right": 6})
    assert c.status is not None and c.status.code == MISSING_INTERNAL_TOPICS
    assert c.status.detail == ("Internal topics are missing: rep-l, rep-r, store-changelog")
    made = {t.name: t for t in c.internal_topics_to_create}
    # All-repartition copartition group: the largest count wins for both.
    assert made["rep-l"].partitions == made["rep-r"].partitions == 6
    assert made["store-changelog"].partitions == 6
    assert made["store-changelog"].replication_factor == 3
    assert made["rep-l"].replication_factor == -1
    assert dict(made["rep-l"].configs)["cleanup.policy"] == "delete"
    assert dict(made["rep-l"].configs)["retention.ms"] == "-1"
    assert dict(made["store-changelog"].configs)["cleanup.policy"] == "compact"
    assert c.tasks == {"0": 4, "1": 6, "2": 6}
    assert c.stateful == {"2"}
    assert not c.is_ready


def test_ready_once_internal_topics_exist() -> None:
    topics = {"left": 4, "right": 6, "rep-l": 6, "rep-r": 6, "store-changelog": 6}
    c = configure_topics(_join_topology(), topics)
    assert c.is_ready and c.status is None and c.internal_topics_to_create == ()
    assert len(c.all_tasks()) == 16
    assert c.metadata_hash == metadata_hash(_join_topology(), topics)
    assert metadata_hash(_join_topology(), {**topics, "left": 5}) != c.metadata_hash


def test_fixed_repartition_count_is_used() -> None:
    c = configure_topics(_join_topology(fixed=8), {"left": 4, "right": 6})
    made = {t.name: t.partitions for t in c.internal_topics_to_create}
    assert made == {"rep-l": 8, "rep-r": 8, "store-changelog": 8}


def test_missing_source_topics() -> None:
    c = configure_topics(_join_topology(), {"left": 4})
    assert c.status is not None and c.status.code == MISSING_SOURCE_TOPICS
    assert c.status.detail == "Source topics right are missing."
    assert c.tasks is None and c.internal_topics_to_create == ()
    many = StreamsTopology(0, (Subtopology("0", ("a", "b", "c", "d", "e")),))
    assert configure_topics(many, {}).status.detail == \
        "Source topics a, b, c and 2 additional topics are missing."


def test_copartitioned_external_topics_must_match() -> None:
    t = StreamsTopology(0, (Subtopology("0", ("a", "b"), copartition_groups=(
        CopartitionGroup((0, 1)),)),))
    assert configure_topics(t, {"a": 2, "b": 2}).is_ready
    c = configure_topics(t, {"a": 2, "b": 3})
    assert c.status is not None and c.status.code == INCORRECTLY_PARTITIONED_TOPICS
    assert c.status.detail == ("Following topics do not have the same number of partitions: "
                               "[{a=2, b=3}]")


def test_repartition_topic_copartitioned_with_an_external_topic_follows_it() -> None:
    t = StreamsTopology(0, (
        Subtopology("0", ("x",), repartition_sink_topics=("rep",)),
        Subtopology("1", ("y",), repartition_source_topics=(TopicInfo("rep"),),
                    copartition_groups=(CopartitionGroup((0,), (), (0,)),)),
    ))
    c = configure_topics(t, {"x": 9, "y": 3})
    assert {i.name: i.partitions for i in c.internal_topics_to_create} == {"rep": 3}
    fixed = StreamsTopology(0, (t.subtopologies[0], Subtopology(
        "1", ("y",), repartition_source_topics=(TopicInfo("rep", 5),),
        copartition_groups=(CopartitionGroup((0,), (), (0,)),))))
    bad = configure_topics(fixed, {"x": 9, "y": 3})
    assert bad.status is not None and bad.status.code == INCORRECTLY_PARTITIONED_TOPICS
    assert bad.status.detail == ("Number of partitions [5] of repartition topic [rep] doesn't "
                                 "match number of partitions [3] of the source topic.")


def test_existing_internal_topic_with_wrong_partitions() -> None:
    c = configure_topics(_join_topology(), {"left": 4, "right": 6, "store-changelog": 2})
    assert c.status is not None and c.status.code == INCORRECTLY_PARTITIONED_TOPICS
    assert c.status.detail == ("Existing topic store-changelog has different number of "
                               "partitions: expected 6, found 2")


def test_unresolvable_repartition_topics_are_invalid_topologies() -> None:
    loop = StreamsTopology(0, (
        Subtopology("0", (), repartition_sink_topics=("r1",),
                    repartition_source_topics=(TopicInfo("r2"),)),
        Subtopology("1", (), repartition_sink_topics=("r2",),
                    repartition_source_topics=(TopicInfo("r1"),)),
    ))
    with pytest.raises(InvalidTopologyError, match="loops in the topology"):
        configure_topics(loop, {})
    never_written = StreamsTopology(0, (Subtopology(
        "0", ("a",), repartition_source_topics=(TopicInfo("r"),)),))
    with pytest.raises(InvalidTopologyError, match="never used as a sink topic"):
        configure_topics(never_written, {"a": 1})
    empty = StreamsTopology(0, (Subtopology("0"),))
    with pytest.raises(InvalidTopologyError, match="No source topics found"):
        configure_topics(empty, {})


def test_request_checks() -> None:
    bad = StreamsTopology(0, (Subtopology("0", ("a",), state_changelog_topics=(
        TopicInfo("c", 4),)),))
    assert validate_request_topology(bad) == ("Changelog topic c must have an undefined "
                                              "partition count, but it is set to 4.")
    assert validate_request_topology(_join_topology()) is None
    assert regex_unsupported(StreamsTopology(0, (Subtopology("0", (), ("a.*",)),)))


def _passes(subs, topics) -> dict[str, int] | str:
    """Kafka's RepartitionTopics as written there: every subtopology visited in order,
    pass after pass, until every sink has a count (the specification of the replay in
    topology._repartition_counts); the error's first words when there is one."""
    counts = {t.name: t.partitions for s in subs for t in s.repartition_source_topics
              if t.partitions}
    while True:
        needed = progress = False
        for s in subs:
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                candidates = [counts[t.name] for t in s.repartition_source_topics
                              if t.name in counts]
                candidates += [topics[t] for t in s.source_topics]
                if candidates:
                    counts[sink], progress = max(candidates), True
                else:
                    needed = True
        if not needed:
            break
        if not progress:
            return "loops"
    if any(t.name not in counts for s in subs for t in s.repartition_source_topics):
        return "never"
    return counts


@settings(max_examples=400)
# A writer visited before its inputs have counts, then once one has, in the same pass
# or the next: what it sees decides its sink's count (r3: 7, r4: 2).
@example([([], [(1, 0), (2, 0)], [3]), (["a"], [], [1]), (["c"], [], [2]),
          ([], [(1, 0), (3, 0)], [4])])
@example([([], [(1, 0)], [2]), ([], [(2, 0), (4, 0)], [5]), ([], [(3, 0)], [4]),
          (["c"], [], [3]), (["a"], [], [1])])  # the same in a later pass (r5: 2)
@given(st.lists(st.tuples(
    st.lists(st.sampled_from(["a", "b", "c"]), max_size=1, unique=True),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0, 0, 0, 3])), max_size=3),
    st.lists(st.integers(0, 5), max_size=2, unique=True)), min_size=1, max_size=8))
def test_repartition_counts_replay_kafkas_passes(spec) -> None:
    from txbroker.coordinator.streams.topology import _repartition_counts

    topics = {"a": 2, "b": 5, "c": 7}
    subs = tuple(Subtopology(str(i), tuple(sources), repartition_sink_topics=tuple(
        f"r{n}" for n in sinks), repartition_source_topics=tuple(
        TopicInfo(f"r{n}", fixed) for n, fixed in dict(reads).items()))
        for i, (sources, reads, sinks) in enumerate(spec))
    expected = _passes(subs, topics)
    if isinstance(expected, str):
        with pytest.raises(InvalidTopologyError, match=expected):
            _repartition_counts(subs, topics.get)
    else:
        assert _repartition_counts(subs, topics.get) == expected


def test_a_long_chain_of_repartition_topics_is_linear() -> None:
    """20,000 subtopologies, each reading what the one before writes, listed last first
    (under a megabyte as a record): Kafka's passes would visit 2 * 10^8 subtopologies."""
    n = 20_000
    chain = StreamsTopology(1, tuple(Subtopology(
        str(i), ("in",) if i == 0 else (), repartition_sink_topics=(f"r{i + 1}",),
        repartition_source_topics=(TopicInfo(f"r{i}"),) if i else ())
        for i in reversed(range(n))))
    started = time.perf_counter()
    configured = configure_topics(chain, {"in": 4})
    assert time.perf_counter() - started < 5
    assert len(configured.tasks) == n and set(configured.tasks.values()) == {4}
