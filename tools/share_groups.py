"""The share-group (KIP-932) side of ``txbroker groups``: what kafka-share-groups.sh
shows and does, over the Kafka protocol (DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets; the group itself comes from
ShareGroupDescribe in ``group_view.py``). Column names and messages are Kafka 4.4's.

A share group has no committed offsets: each share-partition has a start offset (the
first record not yet acknowledged) and a lag (records from there to the high
watermark not yet acknowledged), which the broker computes.
"""

from __future__ import annotations

from kio.schema.alter_share_group_offsets.v0 import request as asgo
from kio.schema.delete_share_group_offsets.v0 import request as dsgo
from kio.schema.describe_share_group_offsets.v1 import request as dso
from kio.schema.errors import ErrorCode

from .cluster_client import Cluster, ToolError, echo, error_name, table
from .group_view import TP, GroupView

SHARE_RESET_OPTIONS = "--to-earliest, --to-latest, --to-offset or --to-datetime"


def share_offsets(cluster: Cluster, group: str) -> dict[TP, tuple[int, int, int]]:
    """(topic, partition) -> (start offset, leader epoch, lag) of every share-partition of
    the group with a state."""
    resp = cluster.coordinator(group).request(90, 1, dso.DescribeShareGroupOffsetsRequest(
        groups=(dso.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),)))
    [g] = resp.groups
    if g.error_code != ErrorCode.none:
        raise ToolError(f"cannot describe the offsets of share group {group!r}: "
                        f"{error_name(g.error_code)}")
    out = {}
    for t in g.topics:
        for p in t.partitions:
            if p.error_code == ErrorCode.none and p.start_offset >= 0:
                out[(t.topic_name, p.partition_index)] = (p.start_offset, p.leader_epoch, p.lag)
    return out


def describe_offsets(cluster: Cluster, g: GroupView, verbose: bool) -> None:
    offsets = share_offsets(cluster, g.group_id)
    if not offsets:
        echo(f"Share group '{g.group_id}' has no offset information.")
        return
    rows = []
    for (topic, partition), (start, epoch, lag) in sorted(offsets.items()):
        rows.append([g.group_id, topic, partition, *([epoch] if verbose else []), start,
                     None if lag < 0 else lag])
    table(rows, ["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if verbose else []),
                 "START-OFFSET", "LAG"])


def _assignment(tps: list[TP]) -> str | None:
    """Kafka's share tool's ASSIGNMENT: ``topic:0,1`` per topic."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items())) or None


def describe_members(g: GroupView, verbose: bool) -> None:
    if not g.members:
        echo(f"Share group '{g.group_id}' has no active members.")
        return
    rows = [[g.group_id, m.member_id, m.host, m.client_id, len(m.assigned),
             *([m.member_epoch] if verbose else []), _assignment(m.assigned)]
            for m in g.members]
    table(rows, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                 *(["MEMBER-EPOCH"] if verbose else []), "ASSIGNMENT"])


def describe_state(cluster: Cluster, g: GroupView, verbose: bool) -> None:
    epochs = [g.group_epoch, g.assignment_epoch] if verbose else []
    table([[g.group_id, cluster.coordinator_id(g.group_id), g.state, *epochs, len(g.members)]],
          ["GROUP", "COORDINATOR (ID)", "STATE",
           *(["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else []), "#MEMBERS"])


def check_resettable(g: GroupView, args) -> None:
    if g.state != "Empty":
        # AlterShareGroupOffsets refuses a group with members (NON_EMPTY_GROUP).
        raise ToolError(f"Share group '{g.group_id}' is not empty.")
    if args.shift_by is not None:
        raise ToolError(f"share group {g.group_id!r}: kafka-share-groups.sh has no "
                        f"--shift-by; give {SHARE_RESET_OPTIONS}")


def alter_offsets(cluster: Cluster, group: str, offsets: dict[TP, int]) -> None:
    topics: dict[str, list] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append(asgo.AlterShareGroupOffsetsRequestPartition(
            partition_index=partition, start_offset=offset))
    resp = cluster.coordinator(group).request(91, 0, asgo.AlterShareGroupOffsetsRequest(
        group_id=group, topics=tuple(asgo.AlterShareGroupOffsetsRequestTopic(
            topic_name=t, partitions=tuple(ps)) for t, ps in topics.items())))
    errors = [] if resp.error_code == ErrorCode.none else [error_name(resp.error_code)]
    errors += [f"{t.topic_name}-{p.partition_index}: {error_name(p.error_code)}"
               for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.none]
    if errors:
        raise ToolError(f"cannot reset the offsets of share group {group!r}: "
                        f"{'; '.join(errors)}")


def delete_offsets(cluster: Cluster, group: str, topics: list[str]) -> int:
    """DeleteShareGroupOffsets; Kafka's TOPIC / STATUS table. 1 if any failed."""
    resp = cluster.coordinator(group).request(92, 0, dsgo.DeleteShareGroupOffsetsRequest(
        group_id=group, topics=tuple(dsgo.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                     for t in dict.fromkeys(topics))))
    if resp.error_code != ErrorCode.none:
        message = resp.error_message or error_name(resp.error_code)
        raise ToolError(f"cannot delete the offsets of share group {group!r}: {message}")
    rows = [[t.topic_name, "Successful" if t.error_code == ErrorCode.none
             else f"Error: {t.error_message or error_name(t.error_code)}"]
            for t in resp.responses]
    table(rows, ["TOPIC", "STATUS"])
    return int(any(t.error_code != ErrorCode.none for t in resp.responses))
