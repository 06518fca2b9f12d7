"""Online migration between a classic group and a consumer group (KIP-848), as Kafka
4.3.1 does it under ``group.consumer.migration.policy``:

* **upgrade** (policy ``bidirectional`` or ``upgrade``): a classic group of the
  ``consumer`` protocol type with members becomes a consumer group when a member joins
  with ConsumerGroupHeartbeat. Its members stay, as classic members (they keep their
  partitions: member epoch = group epoch = assignment epoch = the classic generation,
  target = what they own), and the joining member's heartbeat then bumps the epoch.
* **downgrade** (``bidirectional`` or ``downgrade``): when the last consumer-protocol
  member leaves or is fenced and classic members remain, the group becomes a classic
  group again (generation = the group epoch, each member with the partitions it owns)
  and a rebalance follows.

Plain functions over plain data; the shell appends the records they return (the old
group's tombstones first, then the new group's records) before acting on the change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from txbroker.coordinator.group import consumer_records as cr
from txbroker.coordinator.group.classic import ClassicGroup
from txbroker.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from txbroker.coordinator.group.consumer_records import ClassicMemberMetadata, MemberSubscription
from txbroker.coordinator.group.records import (
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from txbroker.protocol.consumer_protocol import (
    decode_consumer_assignment,
    decode_consumer_subscription,
    encode_consumer_assignment,
)

if TYPE_CHECKING:
    from txbroker.coordinator.group.consumer_state import ConsumerGroups
    from txbroker.coordinator.group.manager import GroupManager
    from txbroker.coordinator.group.results import Effects

__all__ = ["POLICIES", "downgrade", "upgrade", "classic_group_value", "consumer_group_from_classic",
           "consumer_group_records", "consumer_group_tombstones", "downgrade_allowed",
           "upgrade_allowed"]

POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
Record = tuple[bytes, bytes | None]


def upgrade_allowed(policy: str) -> bool:
    return policy in ("bidirectional", "upgrade")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("bidirectional", "downgrade")


def consumer_group_from_classic(classic: ClassicGroup, image) -> ConsumerGroup | None:
    """The consumer group a classic group becomes (Kafka's ConsumerGroup.fromClassicGroup);
    None if a member's subscription cannot be read. ``image``: topic name -> (topic id,
    partitions)."""
    gen = classic.generation_id
    g = ConsumerGroup(classic.group_id, group_epoch=gen, assignment_epoch=gen)
    for cm in classic.members.values():
        meta = cm.metadata(classic.protocol_name) if classic.protocol_name else (
            cm.protocols[0][1] if cm.protocols else b"")
        parsed = decode_consumer_subscription(meta)
        if parsed is None:
            return None
        assigned: dict = {}
        for topic, p in decode_consumer_assignment(cm.assignment):
            found = image.get(topic)
            # A partition two members claim (their bytes come from a client) goes to
            # the first: never two owners.
            if found is not None and 0 <= p < found[1] and (found[0], p) not in g.owners:
                assigned.setdefault(found[0], set()).add(p)
                g.owners[(found[0], p)] = cm.member_id
        sub = MemberSubscription(cm.group_instance_id, None, cm.client_id, cm.client_host,
                                 tuple(sorted(set(parsed[1]))), None, cm.rebalance_timeout_ms,
                                 None, ClassicMemberMetadata(cm.session_timeout_ms,
                                                             tuple(cm.protocols)))
        frozen = {t: frozenset(ps) for t, ps in assigned.items()}
        m = ConsumerMember(cm.member_id, sub, gen, gen, MemberState.STABLE, frozen, {},
                           {(t, p): gen for t, ps in frozen.items() for p in ps})
        g.members[m.member_id] = m
        g.target[m.member_id] = dict(frozen)
    for name in g.subscribed_topic_names():
        found = image.get(name)
        if found is not None:
            g.partition_metadata[found[0]] = (name, found[1])
    return g


def consumer_group_records(g: ConsumerGroup) -> list[Record]:
    """Every record of a freshly converted consumer group, in replay order."""
    gid = g.group_id
    out = [cr.record(cr.GROUP_METADATA, gid, "", g.group_epoch),
           cr.record(cr.PARTITION_METADATA, gid, "", g.partition_metadata)]
    for m in g.members.values():
        out += [cr.record(cr.MEMBER_METADATA, gid, m.member_id, m.subscription),
                cr.record(cr.TARGET_ASSIGNMENT_MEMBER, gid, m.member_id,
                          g.target.get(m.member_id, {})),
                cr.record(cr.CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id, m.current())]
    out.append(cr.record(cr.TARGET_ASSIGNMENT_METADATA, gid, "", g.assignment_epoch))
    return out


def consumer_group_tombstones(g: ConsumerGroup) -> list[Record]:
    """The records that remove a consumer group from ``__consumer_offsets``."""
    gid = g.group_id
    out: list[Record] = []
    for m in g.members.values():
        out += [cr.record(cr.CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id, None),
                cr.record(cr.TARGET_ASSIGNMENT_MEMBER, gid, m.member_id, None),
                cr.record(cr.MEMBER_METADATA, gid, m.member_id, None)]
    out += [cr.record(cr.REGULAR_EXPRESSION, gid, regex, None) for regex in sorted(g.resolved)]
    out += [cr.record(cr.TARGET_ASSIGNMENT_METADATA, gid, "", None),
            cr.record(cr.PARTITION_METADATA, gid, "", None),
            cr.record(cr.GROUP_METADATA, gid, "", None)]
    return out


def _protocol_name(g: ConsumerGroup) -> str | None:
    """The protocol every member supports, in the first member's order of preference."""
    members = list(g.members.values())
    common = None
    for m in members:
        names = {n for n, _ in m.subscription.classic.protocols} if m.subscription.classic else set()
        common = names if common is None else common & names
    if not members or not common:
        return None
    first = members[0].subscription.classic
    return next(n for n, _ in first.protocols if n in common)


def classic_group_value(g: ConsumerGroup, now_ms: int) -> GroupMetadataValue | None:
    """The classic group record a consumer group of classic members becomes (None when
    they share no protocol): generation = the group epoch, each member with the
    partitions it owns, encoded in the consumer protocol."""
    name = _protocol_name(g)
    if name is None:
        return None
    topics = {tid: t for tid, (t, _n) in g.partition_metadata.items()}
    members = []
    for m in g.members.values():
        classic = m.subscription.classic
        assert classic is not None
        meta = next(md for n, md in classic.protocols if n == name)
        parsed = decode_consumer_subscription(meta)
        by_topic: dict[str, list[int]] = {}
        for tid, ps in m.assigned.items():
            if tid in topics:
                by_topic.setdefault(topics[tid], []).extend(ps)
        members.append(MemberMetadata(
            member_id=m.member_id, group_instance_id=m.instance_id,
            client_id=m.subscription.client_id, client_host=m.subscription.client_host,
            rebalance_timeout_ms=m.subscription.rebalance_timeout_ms,
            session_timeout_ms=classic.session_timeout_ms, subscription=meta,
            assignment=encode_consumer_assignment(
                min(parsed[0], 3) if parsed is not None else 0, by_topic)))
    return GroupMetadataValue(protocol_type="consumer", generation_id=g.group_epoch,
                              protocol_name=name, leader_id=members[0].member_id,
                              current_state_timestamp_ms=now_ms, members=tuple(members))


def upgrade(classic_groups: GroupManager, consumer: ConsumerGroups, group_id: str, image,
            now_ms: int) -> tuple[list[Record], Effects | None, str | None]:
    """Kafka's validateOnlineUpgrade and convertToConsumerGroup: the classic group
    ``group_id`` (with members) leaves ``classic_groups`` and joins ``consumer``.
    Returns (records, the classic side's effects, None), or ([], None, why not)."""
    classic = classic_groups.classic_group(group_id)
    assert classic is not None
    policy = consumer.config.migration_policy
    if not upgrade_allowed(policy):
        return [], None, f"group.consumer.migration.policy is {policy}"
    if classic.protocol_type != "consumer":
        return [], None, f"its protocol type is {classic.protocol_type!r}, not 'consumer'"
    if len(classic.members) > consumer.config.max_size:
        return [], None, "it has more members than group.consumer.max.size"
    g = consumer_group_from_classic(classic, image)
    if g is None:
        return [], None, "a member's subscription cannot be read"
    effects = classic_groups.detach_group(group_id)
    consumer.adopt(g, now_ms)
    return ([(encode_group_metadata_key(group_id), None)] + consumer_group_records(g),
            effects, None)


def downgrade(consumer: ConsumerGroups, classic_max_size: int, group_id: str, now_ms: int
              ) -> tuple[list[Record], GroupMetadataValue | None]:
    """After a member left: if only classic members remain and the policy allows it,
    the consumer group is removed and its records returned with the classic group it
    becomes (for ``GroupManager.adopt_group`` once they are appended); ([], None) if not."""
    g = consumer.groups.get(group_id)
    if (g is None or not g.members or not downgrade_allowed(consumer.config.migration_policy)
            or not all(m.uses_classic for m in g.members.values())
            or len(g.members) > classic_max_size):
        return [], None
    value = classic_group_value(g, now_ms)
    if value is None:
        return [], None
    records = consumer_group_tombstones(g)
    del consumer.groups[group_id]
    records.append((encode_group_metadata_key(group_id), encode_group_metadata_value(value)))
    return records, value
