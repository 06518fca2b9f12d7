"""The streams-group (KIP-1071) side of ``txbroker groups``: what kafka-streams-groups.sh
shows and does, over the Kafka protocol (the group from StreamsGroupDescribe in
``group_view.py``; OffsetFetch, ListOffsets, OffsetCommit, OffsetDelete). Column names
and messages are Kafka 4.4's.

A streams group's members own tasks (subtopology id, partition), not partitions: a
task reads partition p of every source topic of its subtopology, so the partitions
described are those of the members' active tasks.
"""

from __future__ import annotations

import sys

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0 import request as od
from kio.schema.offset_fetch.v7 import request as of

from .cluster_client import LATEST, Cluster, ToolError, echo, error_name, table
from .group_view import TP, GroupView

_KINDS = (("ACTIVE", "active_tasks"), ("STANDBY", "standby_tasks"),
          ("WARMUP", "warmup_tasks"))


def committed(cluster: Cluster, group: str) -> dict[TP, tuple[int, int]]:
    """(topic, partition) -> (committed offset, leader epoch) of the group."""
    resp = cluster.coordinator(group).request(9, 7, of.OffsetFetchRequest(
        group_id=group, topics=None, require_stable=False))
    if resp.error_code != ErrorCode.none:
        raise ToolError(f"cannot fetch the offsets of group {group!r}: "
                        f"{error_name(resp.error_code)}")
    return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch)
            for t in resp.topics for p in t.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0}


def source_topics(g: GroupView) -> dict[str, list[str]]:
    """subtopology id -> the topics its tasks read (source and repartition source)."""
    topology = getattr(g.streams, "topology", None)
    if topology is None:
        return {}
    return {s.subtopology_id: [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
            for s in topology.subtopologies or ()}


def task_partitions(g: GroupView) -> list[TP]:
    """The topic-partitions of the members' active tasks."""
    sources = source_topics(g)
    out = set()
    for m in getattr(g.streams, "members", ()):
        for t in m.assignment.active_tasks:
            out.update((topic, p) for topic in sources.get(t.subtopology_id, ())
                       for p in t.partitions)
    return sorted(out)


def describe_offsets(cluster: Cluster, g: GroupView, verbose: bool) -> None:
    partitions = task_partitions(g)
    if not partitions:
        return  # as Kafka's tool: a group without active tasks shows no rows
    offsets = committed(cluster, g.group_id)
    leaders = cluster.partitions(sorted({t for t, _ in partitions}))
    end = cluster.list_offsets(dict.fromkeys(partitions, LATEST), leaders=leaders)
    rows = []
    for tp in partitions:
        current, epoch = offsets.get(tp, (None, -1))
        lag = max(end[tp] - (current or 0), 0)
        rows.append([g.group_id, tp[0], tp[1],
                     *([current, None if epoch < 0 else epoch, end[tp]] if verbose else []),
                     lag])
    table(rows, ["GROUP", "TOPIC", "PARTITION",
                 *(["CURRENT-OFFSET", "LEADER-EPOCH", "LOG-END-OFFSET"] if verbose else []),
                 "OFFSET-LAG"])


def tasks_text(assignment, prefix: str = "") -> str:
    """Kafka's ASSIGNMENTS cell: ``ACTIVE: 0:[1,2]; STANDBY: 1:[0]; `` (kinds with tasks)."""
    out = ""
    for name, field in _KINDS:
        tasks = getattr(assignment, field)
        if tasks:
            out += f"{prefix}{name}:" + "".join(
                f" {t.subtopology_id}:[{','.join(map(str, t.partitions))}];" for t in tasks) + " "
    return out


def describe_members(g: GroupView, verbose: bool) -> None:
    members = getattr(g.streams, "members", ())
    if not members:
        return  # as Kafka's tool: no rows
    rows = []
    for m in members:
        assignments = tasks_text(m.assignment)
        if verbose:
            assignments += tasks_text(m.target_assignment, "TARGET-")
        rows.append([g.group_id, *([g.assignment_epoch, m.topology_epoch] if verbose else []),
                     m.member_id, *(["classic" if m.is_classic else "streams", m.member_epoch]
                                    if verbose else []),
                     m.process_id, m.client_id, assignments.rstrip() or None])
    table(rows, ["GROUP", *(["TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH"] if verbose else []),
                 "MEMBER", *(["MEMBER-PROTOCOL", "MEMBER-EPOCH"] if verbose else []),
                 "PROCESS", "CLIENT-ID", "ASSIGNMENTS"])


def describe_state(cluster: Cluster, g: GroupView, verbose: bool) -> None:
    if not g.members:
        # Kafka's tool says so (on standard error) before the table.
        print(f"Error: Streams group '{g.group_id}' has no active members.", file=sys.stderr)
    node = cluster.coordinator_id(g.group_id)
    epochs = [g.group_epoch, g.assignment_epoch] if verbose else []
    # StreamsGroupDescribe v0 names no assignor: Kafka's tool prints an empty cell.
    table([[g.group_id, f"{cluster.brokers.get(node, '')} ({node})", "", g.state, *epochs, len(g.members)]],
          ["GROUP", "COORDINATOR (ID)", "ASSIGNOR", "STATE",
           *(["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if verbose else []), "#MEMBERS"])


def check_resettable(g: GroupView) -> None:
    if g.state not in ("Empty", "Dead"):
        raise ToolError(f"Assignments can only be reset if the group '{g.group_id}' is "
                        f"inactive, but the current state is {g.state}.")


def delete_offsets(cluster: Cluster, group: str, topics: list[str] | None) -> int:
    """OffsetDelete of every partition of ``topics`` (None: every partition the group has
    an offset for); Kafka's TOPIC / PARTITION / STATUS table. 1 if any failed."""
    if topics is None:
        chosen = sorted(committed(cluster, group))
    else:
        known = cluster.partitions(sorted(set(topics)))
        chosen = [(t, p) for t in dict.fromkeys(topics) for p in sorted(known[t])]
    by_topic: dict[str, list[int]] = {}
    for topic, partition in chosen:
        by_topic.setdefault(topic, []).append(partition)
    resp = cluster.coordinator(group).request(47, 0, od.OffsetDeleteRequest(
        group_id=group, topics=tuple(od.OffsetDeleteRequestTopic(name=t, partitions=tuple(
            od.OffsetDeleteRequestPartition(partition_index=p) for p in ps))
            for t, ps in by_topic.items())))
    if resp.error_code != ErrorCode.none:
        raise ToolError(f"cannot delete the offsets of streams group {group!r}: "
                        f"{error_name(resp.error_code)}")
    rows = [[t.name, p.partition_index, "Successful" if p.error_code == ErrorCode.none
             else f"Error: {error_name(p.error_code)}"] for t in resp.topics for p in t.partitions]
    failed = any(r[2] != "Successful" for r in rows)
    if not failed:
        echo(f"Request succeeded for deleting offsets from group {group}.")
    table(rows, ["TOPIC", "PARTITION", "STATUS"])
    return int(failed)
