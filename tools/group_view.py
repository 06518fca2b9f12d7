"""One group as ``txbroker groups describe`` shows it, whichever protocol it speaks.

A classic group comes from DescribeGroups (its members' assignments are the consumer
protocol's bytes). A consumer-protocol group (KIP-848) is Dead with no members to
DescribeGroups, as on Kafka, so it is asked again with ConsumerGroupDescribe, which
carries the epochs and each member's current and target assignment, as Kafka's
kafka-consumer-groups.sh does through the Admin client. A share group (KIP-932) is
neither: it comes from ShareGroupDescribe, as kafka-share-groups.sh asks for it, and a
streams group (KIP-1071) from StreamsGroupDescribe, as kafka-streams-groups.sh does.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.api_versions.v0 import request as av
from kio.schema.consumer_group_describe.v0 import request as cgd
from kio.schema.describe_groups.v5 import request as dsg
from kio.schema.errors import ErrorCode
from kio.schema.share_group_describe.v1 import request as sgd
from kio.schema.streams_group_describe.v0 import request as stgd
from txbroker.protocol.consumer_protocol import decode_consumer_assignment

from .cluster_client import Cluster, ToolError, error_name

TP = tuple[str, int]


@dataclass
class MemberView:
    member_id: str
    instance_id: str | None
    host: str
    client_id: str
    assigned: list[TP]
    member_epoch: int | None = None  # consumer protocol only
    target: list[TP] | None = None  # consumer protocol only


@dataclass
class GroupView:
    group_id: str
    state: str
    strategy: str | None  # classic: the chosen protocol; consumer: the server assignor
    members: list[MemberView]
    group_epoch: int | None = None  # consumer protocol and share groups
    assignment_epoch: int | None = None  # consumer protocol and share groups
    group_type: str = "classic"  # ListGroups' type: classic, consumer, share or streams
    # A streams group's StreamsGroupDescribe entry (topology, members' tasks), as sent.
    streams: object | None = None

    @property
    def consumer_protocol(self) -> bool:
        return self.group_type == "consumer"

    @property
    def share(self) -> bool:
        return self.group_type == "share"

    @property
    def is_streams(self) -> bool:
        return self.group_type == "streams"


def _partitions(assignment) -> list[TP]:
    return sorted((t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions)


def _serves(conn, api_key: int) -> bool:
    # A broker without the API (Kafka < 3.7 for ConsumerGroupDescribe, share groups off
    # for ShareGroupDescribe) closes the connection on it.
    resp = conn.request(18, 0, av.ApiVersionsRequest())
    return any(k.api_key == api_key for k in resp.api_keys)


def _described(cluster: Cluster, group: str, api_key: int, version: int, request):
    """The group's entry of a ConsumerGroupDescribe / ShareGroupDescribe answer; None when
    it is not a group of that type (or the broker does not serve the API)."""
    if not _serves(cluster.coordinator(group), api_key):
        return None
    [g] = cluster.coordinator(group).request(api_key, version, request).groups
    if g.error_code == ErrorCode.group_id_not_found:
        return None
    if g.error_code != ErrorCode.none:
        raise ToolError(f"cannot describe group {group!r}: {error_name(g.error_code)}")
    return g


def _consumer_group(cluster: Cluster, group: str) -> GroupView | None:
    """The group from ConsumerGroupDescribe; None when it is not a consumer group (or
    the broker has no consumer groups)."""
    g = _described(cluster, group, 69, 0, cgd.ConsumerGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False))
    if g is None:
        return None
    members = [MemberView(m.member_id, m.instance_id, m.client_host, m.client_id,
                          _partitions(m.assignment), m.member_epoch,
                          _partitions(m.target_assignment)) for m in g.members]
    return GroupView(group, g.group_state, g.assignor_name or None, members,
                     g.group_epoch, g.assignment_epoch, "consumer")


def _share_group(cluster: Cluster, group: str) -> GroupView | None:
    """The group from ShareGroupDescribe; None when it is not a share group (or the
    broker has share groups off)."""
    g = _described(cluster, group, 77, 1, sgd.ShareGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False))
    if g is None:
        return None
    members = [MemberView(m.member_id, None, m.client_host, m.client_id,
                          _partitions(m.assignment), m.member_epoch) for m in g.members]
    return GroupView(group, g.group_state, g.assignor_name or None, members,
                     g.group_epoch, g.assignment_epoch, "share")


def _streams_group(cluster: Cluster, group: str) -> GroupView | None:
    """The group from StreamsGroupDescribe; None when it is not a streams group (or the
    broker has streams groups off)."""
    g = _described(cluster, group, 89, 0, stgd.StreamsGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False))
    if g is None:
        return None
    members = [MemberView(m.member_id, m.instance_id, m.client_host, m.client_id, [],
                          m.member_epoch) for m in g.members]
    return GroupView(group, g.group_state, None, members, g.group_epoch, g.assignment_epoch,
                     "streams", g)


def describe_group(cluster: Cluster, group: str) -> GroupView:
    resp = cluster.coordinator(group).request(15, 5, dsg.DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False))
    [g] = resp.groups
    # Kafka answers a group of another type Dead (GROUP_ID_NOT_FOUND from v6 on).
    other_type = g.error_code == ErrorCode.group_id_not_found or (
        g.error_code == ErrorCode.none and g.group_state == "Dead" and not g.members)
    if g.error_code != ErrorCode.none and not other_type:
        raise ToolError(f"cannot describe group {group!r}: {error_name(g.error_code)}")
    if other_type:
        found = (_consumer_group(cluster, group) or _share_group(cluster, group)
                 or _streams_group(cluster, group))
        if found is not None:
            return found
    members = [MemberView(m.member_id, m.group_instance_id, m.client_host, m.client_id,
                          decode_consumer_assignment(m.member_assignment)) for m in g.members]
    return GroupView(group, g.group_state, g.protocol_data or None, members)


def partition_list(tps: list[TP] | None) -> str | None:
    return None if tps is None else ",".join(f"{t}-{p}" for t, p in tps) or None
