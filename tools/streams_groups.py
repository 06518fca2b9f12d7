"""The streams-group (KIP-1071) side of ``txbroker groups``: what kafka-streams-groups.sh
shows and does, over the Kafka protocol (the group from StreamsGroupDescribe in
``group_view.py``; OffsetFetch, ListOffsets, OffsetCommit, OffsetDelete). Column names
and messages are Kafka 4.4's.

A streams group's members own tasks (subtopology id, partition), not partitions: a
task reads partition p of every source topic of its subtopology, so the partitions
described are those of the members' active tasks.
"""

from __future__ import annotations

import datetime
import re
import sys

from kio.schema.delete_topics.v5 import request as dt
from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0 import request as od
from kio.schema.offset_fetch.v7 import request as of
from txbroker.protocol.messages import request_module

from .cluster_client import LATEST, Cluster, ToolError, echo, error_name, table
from .group_view import TP, GroupView

_KINDS = (("ACTIVE", "active_tasks"), ("STANDBY", "standby_tasks"),
          ("WARMUP", "warmup_tasks"))
# StreamsGroupDescribe v1's TopologyDescriptionStatus.
_STATUS = {0: "NOT_REQUESTED", 1: "NOT_STORED", 2: "ERROR", 3: "AVAILABLE"}
# The names kafka-streams-groups takes for a group's internal topics (besides the prefix
# "<group>-"): changelog, repartition and foreign-key-join subscription topics.
_INTERNAL_SUFFIXES = ("-changelog", "-repartition", "-subscription-registration-topic",
                      "-subscription-response-topic")
_FK_JOIN = re.compile(r".+-KTABLE-FK-JOIN-SUBSCRIPTION-(REGISTRATION|RESPONSE)-\d+-topic")
_DELETE_TIMEOUT = datetime.timedelta(seconds=30)


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


def describe_topology(cluster: Cluster, g: GroupView) -> int:
    """``--describe --topology``: the topology description a broker's description plugin
    stored (StreamsGroupDescribe v1); Kafka's tool's error (exit 1) when there is none
    (always on txbroker and on a Kafka without the plugin)."""
    m = request_module(89, 1)
    [d] = cluster.coordinator(g.group_id).request(89, 1, m.StreamsGroupDescribeRequest(
        group_ids=(g.group_id,), include_authorized_operations=False,
        include_topology_description=True)).groups
    status = int(d.topology_description_status)
    if status == 3:
        raise ToolError(f"streams group {g.group_id!r} has a topology description, which "
                        "txbroker groups does not print (kafka-streams-groups.sh "
                        "--describe --topology does)")
    if status == 1:
        why = f"No topology description is stored for streams group '{g.group_id}'."
    elif status == 2:
        why = (f"The broker failed to fetch the topology description for streams group "
               f"'{g.group_id}'. See the broker logs for details.")
    else:
        why = (f"No topology description is available for streams group '{g.group_id}' "
               f"(status: {_STATUS.get(status, status)}).")
    print(f"Error: {why}", file=sys.stderr)
    return 1


def is_inferred_internal(topic: str, group: str) -> bool:
    """Whether kafka-streams-groups takes ``topic`` for one of ``group``'s internal topics."""
    return topic.startswith(f"{group}-") and (
        topic.endswith(_INTERNAL_SUFFIXES) or _FK_JOIN.fullmatch(topic) is not None)


def internal_topics(g: GroupView) -> list[str]:
    """The group's internal topics as kafka-streams-groups finds them: the repartition and
    changelog topics of its topology that are not source topics, if named as the group's
    (the others are said and kept)."""
    topology = getattr(g.streams, "topology", None)
    subtopologies = (topology.subtopologies or ()) if topology is not None else ()
    sources = {t for s in subtopologies for t in s.source_topics}
    found: list[str] = []
    for s in subtopologies:
        for topic in [*(t.name for t in s.repartition_source_topics),
                      *(t.name for t in s.state_changelog_topics)]:
            if topic in sources or topic in found:
                continue
            if is_inferred_internal(topic, g.group_id):
                found.append(topic)
            else:
                print(f"Error: The internal topic '{topic}' is not inferred as internal and "
                      f"thus will not be deleted with the group '{g.group_id}'.",
                      file=sys.stderr)
    return found


def delete_topics(cluster: Cluster, topics: list[str]) -> dict[str, int]:
    """DeleteTopics; the topics it refused -> error code."""
    if not topics:
        return {}
    resp = cluster.bootstrap.request(20, 5, dt.DeleteTopicsRequest(
        topic_names=tuple(topics), timeout=_DELETE_TIMEOUT))
    return {r.name: r.error_code for r in resp.responses if r.error_code != ErrorCode.none}


def delete_after_reset(cluster: Cluster, group: str, topics: list[str]) -> int:
    """reset-offsets --execute with --delete-internal-topic / --delete-all-internal-topics:
    the topics deleted after the reset, Kafka's tool's errors (1 if any)."""
    failed = delete_topics(cluster, topics)
    if not failed:
        return 0
    if ErrorCode.unknown_topic_or_partition in failed.values():
        why = f"Deleting internal topics for group '{group}' failed because the topics do not exist."
    else:
        why = (f"Deleting internal topics for group '{group}' failed due to "
               f"{', '.join(sorted({error_name(c) for c in failed.values()}))}")
    print(f"Error: {why}", file=sys.stderr)
    return 1


def delete_with_group(cluster: Cluster, group: str, topics: list[str]) -> int:
    """delete --delete-all-internal-topics, once the group is deleted: its internal topics
    (found before), with Kafka's tool's lines in its order (1 if any failed)."""
    failed = delete_topics(cluster, topics)
    for topic in failed:
        echo(f"Failed to delete internal topic: {topic}")
    echo(f"Deletion of requested streams groups ('{group}') was successful.")
    if not failed:
        if topics:
            echo(f"Deletion of associated internal topics of the streams groups ('{group}') "
                 "was successful.")
        return 0
    echo("Deletion of some associated internal topics failed:")
    echo(f"* Internal topics of the streams group '{group}' could not be deleted due to: "
         f"{', '.join(sorted({error_name(c) for c in failed.values()}))}")
    return 1
