"""``txbroker groups list|describe|reset-offsets|delete-offsets|delete``:
kafka-consumer-groups.sh's commands and option names, over the Kafka protocol
(ListGroups, FindCoordinator, DescribeGroups, ConsumerGroupDescribe, OffsetFetch,
ListOffsets, OffsetCommit, DeleteGroups). Groups of either protocol: classic, and
consumer (KIP-848), whose members show their member epoch and current and target
assignment with --verbose. Share groups (KIP-932) are described, reset and have their
offsets deleted as kafka-share-groups.sh does it (share_groups.py); streams groups
(KIP-1071) as kafka-streams-groups.sh does it (streams_groups.py).

describe shows, beside Kafka's LOG-END-OFFSET and LAG, the partition's last stable
offset and the lag of a read_committed consumer (LSO - committed offset): with a
transaction open, a read_committed consumer cannot read past the LSO, so that is
the lag it can catch up on now.

reset-offsets is a dry run unless --execute is given, as in Kafka's tool, and only
resets a group with no active members (Empty or Dead).
"""

from __future__ import annotations

import argparse
import datetime
import sys

from kio.schema.delete_groups.v2 import request as dg
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v4 import request as lg4
from kio.schema.list_groups.v5 import request as lg5
from kio.schema.offset_commit.v7 import request as oc
from kio.schema.offset_fetch.v7 import request as of

from . import share_groups, streams_groups
from .cluster_client import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    Cluster,
    ToolError,
    add_client_options,
    add_client_options_to_subcommands,
    echo,
    error_name,
    run_tool,
    table,
)
from .group_view import GroupView, describe_group, partition_list

# ListGroups' group types as Kafka's tools print them (GroupType's names).
_TYPE_NAMES = {"classic": "Classic", "consumer": "Consumer", "share": "Share",
               "streams": "Streams"}

_INACTIVE = ("Empty", "Dead")


def _committed(cluster: Cluster, group: str) -> dict[tuple[str, int], int]:
    resp = cluster.coordinator(group).request(9, 7, of.OffsetFetchRequest(
        group_id=group, topics=None, require_stable=False))
    if resp.error_code != ErrorCode.none:
        raise ToolError(f"cannot fetch the offsets of group {group!r}: "
                        f"{error_name(resp.error_code)}")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _listed(cluster: Cluster, states: tuple[str, ...] = (),
            types: tuple[str, ...] | None = None) -> list[tuple[str, str, str]]:
    """(group id, state, type) of every group on every broker (each coordinates some).
    ``types``: ask with ListGroups v5's types filter (Kafka 3.8+); None: v4, no types."""
    cluster.metadata([])
    found = {}
    for node_id in sorted(cluster.brokers) or [None]:
        conn = cluster.bootstrap if node_id is None else cluster.node(node_id)
        if types is None:
            resp = conn.request(16, 4, lg4.ListGroupsRequest(states_filter=states))
        else:
            resp = conn.request(16, 5, lg5.ListGroupsRequest(states_filter=states,
                                                             types_filter=types))
        if resp.error_code != ErrorCode.none:
            raise ToolError(f"cannot list groups: {error_name(resp.error_code)}")
        for g in resp.groups:
            found[g.group_id] = (g.group_state, getattr(g, "group_type", ""))
    return [(g, state, kind) for g, (state, kind) in sorted(found.items())]


def _group_ids(cluster: Cluster, states: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(group id, state) of every group."""
    return [(g, state) for g, state, _ in _listed(cluster, states)]


def cmd_list(cluster: Cluster, args) -> int:
    states = tuple(args.state or ())
    if args.type is None:
        groups = _listed(cluster, states)
    else:
        types = tuple(t.lower() for t in args.type)
        unknown = sorted(set(types) - set(_TYPE_NAMES))
        if unknown:
            raise ToolError(f"--type {', '.join(unknown)}: the types are classic, consumer, "
                            "share, streams")
        groups = _listed(cluster, states, types)
    if args.state is None and args.type is None:
        for group, _state, _type in groups:
            echo(group)
        return 0
    # Kafka's columns: GROUP, TYPE (with --type), STATE (with --state).
    table([[g, *([_TYPE_NAMES.get(t, t)] if args.type is not None else []),
            *([s] if args.state is not None else [])] for g, s, t in groups],
          ["GROUP", *(["TYPE"] if args.type is not None else []),
           *(["STATE"] if args.state is not None else [])])
    return 0


def _groups_of(cluster: Cluster, args) -> list[str]:
    if args.all_groups:
        return [g for g, _ in _group_ids(cluster)]
    if not args.group:
        raise ToolError("give --group GROUP (repeatable) or --all-groups")
    return args.group


def cmd_describe(cluster: Cluster, args) -> int:
    failed = 0
    for i, group in enumerate(_groups_of(cluster, args)):
        if i:
            echo("")
        g = describe_group(cluster, group)
        if args.topology:
            if not g.is_streams:
                raise ToolError(f"--topology: group {group!r} is not a streams group")
            failed |= streams_groups.describe_topology(cluster, g)
        elif g.share or g.is_streams:
            _describe_by(share_groups if g.share else streams_groups, cluster, g, args)
        elif args.state:
            _describe_state(cluster, g, args.verbose)
        elif args.members:
            _describe_members(g, args.verbose)
        else:
            _describe_offsets(cluster, g)
    return failed


def _describe_by(tool, cluster: Cluster, g: GroupView, args) -> None:
    """A share or streams group, as kafka-share-groups.sh / kafka-streams-groups.sh
    (``tool``: share_groups or streams_groups) describe it."""
    if args.state:
        tool.describe_state(cluster, g, args.verbose)
    elif args.members:
        tool.describe_members(g, args.verbose)
    else:
        tool.describe_offsets(cluster, g, args.verbose)


def _describe_state(cluster: Cluster, g: GroupView, verbose: bool) -> None:
    # As Kafka's tool: --verbose adds the epochs (a classic group has none: "-").
    row = [g.group_id, f"{cluster.coordinator_id(g.group_id)}", g.strategy, g.state]
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    if verbose:
        row += [g.group_epoch, g.assignment_epoch]
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
    table([row + [len(g.members)]], header + ["#MEMBERS"])


def _describe_members(g: GroupView, verbose: bool) -> None:
    header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        # Kafka's columns: a consumer-protocol member's epoch and its current and target
        # assignment (the target's epoch is the group's assignment epoch); a classic
        # member's assignment.
        header += (["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
                   if g.consumer_protocol else ["ASSIGNMENT"])
    rows = []
    for m in g.members:
        row = [g.group_id, m.member_id, m.instance_id, m.host, m.client_id, len(m.assigned)]
        if verbose and g.consumer_protocol:
            row += [m.member_epoch, partition_list(m.assigned), g.assignment_epoch,
                    partition_list(m.target)]
        elif verbose:
            row.append(partition_list(m.assigned))
        rows.append(row)
    table(rows, header)


def _describe_offsets(cluster: Cluster, g: GroupView) -> None:
    group = g.group_id
    owner = {tp: m for m in g.members for tp in m.assigned}
    committed = _committed(cluster, group)
    partitions = sorted(set(committed) | set(owner))
    if not partitions:
        echo(f"Consumer group '{group}' has no active members and no committed offsets.")
        return
    latest = dict.fromkeys(partitions, LATEST)
    leaders = cluster.partitions(sorted({t for t, _ in partitions}))
    end = cluster.list_offsets(latest, leaders=leaders)
    stable = cluster.list_offsets(latest, READ_COMMITTED, leaders=leaders)
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        m = owner.get(tp)
        rows.append([group, tp[0], tp[1], current, end[tp],
                     None if current is None else max(end[tp] - current, 0),
                     stable[tp], None if current is None else max(stable[tp] - current, 0),
                     m.member_id if m else None, m.host if m else None,
                     m.client_id if m else None])
    table(rows, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "LAST-STABLE-OFFSET", "READ-COMMITTED-LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID"])


def _parse_datetime(text: str) -> int:
    """Kafka's --to-datetime ('YYYY-MM-DDTHH:mm:SS.sss', optional zone; local time
    without one) -> milliseconds since the epoch."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(f"--to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS.sss "
                        "(optionally with a zone, e.g. +01:00 or Z)") from None
    if when.tzinfo is None:
        when = when.astimezone()  # the local zone, as Kafka's tool assumes
    return int(when.timestamp() * 1000)


def _reset_partitions(cluster: Cluster, group: str, args,
                      committed: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    if not args.topic:
        raise ToolError("give --topic TOPIC[:P,P...] (repeatable) or --all-topics")
    wanted = []
    names = [spec.split(":", 1)[0] for spec in args.topic]
    known = cluster.partitions(sorted(set(names)))
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                chosen = [int(p) for p in parts.split(",") if p.strip()]
            except ValueError:
                raise ToolError(f"--topic {spec!r}: partitions must be numbers") from None
            missing = [p for p in chosen if p not in known[topic]]
            if missing:
                raise ToolError(f"--topic {spec!r}: {topic} has no partition "
                                f"{', '.join(map(str, missing))}")
        else:
            chosen = sorted(known[topic])
        wanted += [(topic, p) for p in chosen]
    return sorted(set(wanted))


def _new_offsets(cluster: Cluster, args, partitions: list[tuple[str, int]],
                 current: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Where --to-* / --shift-by puts each partition; ``current``: the committed (or
    share-partition start) offsets."""
    leaders = cluster.partitions(sorted({t for t, _ in partitions}))
    earliest = cluster.list_offsets(dict.fromkeys(partitions, EARLIEST), leaders=leaders)
    latest = cluster.list_offsets(dict.fromkeys(partitions, LATEST), leaders=leaders)
    if args.to_datetime is not None:
        found = cluster.list_offsets(
            dict.fromkeys(partitions, _parse_datetime(args.to_datetime)), leaders=leaders)
    new = {}
    for tp in partitions:
        if args.to_earliest:
            offset = earliest[tp]
        elif args.to_latest:
            offset = latest[tp]
        elif args.to_offset is not None:
            offset = args.to_offset
        elif args.shift_by is not None:
            # No committed offset: shift from the earliest, as a new consumer starts.
            offset = current.get(tp, earliest[tp]) + args.shift_by
        else:  # --to-datetime: no record that late -> the end of the log
            offset = found[tp] if found[tp] >= 0 else latest[tp]
        # Kafka's tools clamp into the log's range, so a consumer never starts outside it.
        new[tp] = min(max(offset, earliest[tp]), latest[tp])
    return new


def cmd_reset_offsets(cluster: Cluster, args) -> int:
    if args.execute and args.dry_run:
        raise ToolError("give --dry-run or --execute, not both")
    groups = _groups_of(cluster, args)
    plans = []
    for group in groups:
        g = describe_group(cluster, group)
        if (args.delete_internal_topic or args.delete_all_internal_topics) and not g.is_streams:
            raise ToolError(f"group {group!r} is not a streams group: only a streams group "
                            "has internal topics to delete")
        if g.share:
            share_groups.check_resettable(g, args)
            current = {tp: o[0] for tp, o in share_groups.share_offsets(cluster, group).items()}
        elif g.is_streams:
            streams_groups.check_resettable(g)
            current = _committed(cluster, group)
        elif g.state not in _INACTIVE:
            # As Kafka's tool: a live member would overwrite the reset with its next commit.
            raise ToolError(f"assignments can only be reset if the group '{group}' is "
                            f"inactive, but the current state is {g.state}")
        else:
            current = _committed(cluster, group)
        partitions = _reset_partitions(cluster, group, args, current)
        if not partitions:
            raise ToolError(f"group {group!r} has no committed offsets to reset "
                            "(name the partitions with --topic)")
        plans.append((g, _new_offsets(cluster, args, partitions, current)))
    failed = 0
    for g, new in plans:
        if args.execute and g.share:
            share_groups.alter_offsets(cluster, g.group_id, new)
        elif args.execute:
            _commit(cluster, g.group_id, new)
            if g.is_streams and (args.delete_internal_topic or args.delete_all_internal_topics):
                failed |= streams_groups.delete_after_reset(
                    cluster, g.group_id, streams_groups.internal_topics(g)
                    if args.delete_all_internal_topics else args.delete_internal_topic)
    table([[g.group_id, t, p, offset] for g, new in plans for (t, p), offset in sorted(new.items())],
          ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
    if not args.execute and not args.dry_run:
        print("note: dry run (nothing changed); add --execute to reset the offsets",
              file=sys.stderr)
    return failed


def _commit(cluster: Cluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    topics: dict[str, list] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        topics.setdefault(topic, []).append(oc.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=""))
    # Generation -1 and no member id: an admin commit, accepted for a group without members.
    resp = cluster.coordinator(group).request(8, 7, oc.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(oc.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                     for t, ps in topics.items())))
    errors = [f"{t.name}-{p.partition_index}: {error_name(p.error_code)}"
              for t in resp.topics for p in t.partitions if p.error_code != ErrorCode.none]
    if errors:
        raise ToolError(f"cannot commit the offsets of group {group!r}: {'; '.join(errors)}")


def cmd_delete_offsets(cluster: Cluster, args) -> int:
    g = describe_group(cluster, args.group)
    if g.is_streams:
        return streams_groups.delete_offsets(cluster, args.group,
                                             None if args.all_topics else args.topic)
    if not g.share:
        raise ToolError(f"group {args.group!r} is not a share group or a streams group: "
                        "delete-offsets deletes their offsets (DeleteShareGroupOffsets, "
                        "OffsetDelete)")
    if not args.topic:
        raise ToolError("give --topic TOPIC (repeatable)")
    return share_groups.delete_offsets(cluster, args.group, args.topic)


def cmd_delete(cluster: Cluster, args) -> int:
    failed = 0
    groups = _groups_of(cluster, args)
    types = {g: t for g, _state, t in _listed(cluster, (), ())} if groups else {}
    for group in groups:
        # The internal topics are found before the group (and its topology) is gone.
        internal = streams_groups.internal_topics(describe_group(cluster, group)) \
            if args.delete_all_internal_topics and types.get(group) == "streams" else None
        resp = cluster.coordinator(group).request(42, 2, dg.DeleteGroupsRequest(
            groups_names=(group,)))
        [result] = resp.results
        if result.error_code != ErrorCode.none:
            print(f"error: cannot delete group {group!r}: {error_name(result.error_code)}",
                  file=sys.stderr)
            failed = 1
        elif internal is not None:
            failed |= streams_groups.delete_with_group(cluster, group, internal)
        else:
            kind = {"share": "share", "streams": "streams"}.get(types.get(group, ""), "consumer")
            echo(f"Deletion of requested {kind} groups ('{group}') was successful.")
    return failed


def add_parser(sub) -> None:
    p = sub.add_parser("groups", help="consumer groups, like kafka-consumer-groups.sh",
                       description=__doc__.replace("``", ""), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    gsub = p.add_subparsers(dest="groups_command", required=True)
    ls = gsub.add_parser("list", help="group ids (with --state: and their states)")
    ls.add_argument("--state", nargs="*", metavar="STATE",
                    help="show states; only groups in these states if given "
                         "(Empty, Stable, PreparingRebalance, CompletingRebalance, Dead)")
    ls.add_argument("--type", nargs="*", metavar="TYPE",
                    help="show types; only groups of these types if given (classic, "
                         "consumer, share, streams)")

    def groups_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--group", action="append", help="(repeatable)")
        parser.add_argument("--all-groups", action="store_true")

    d = gsub.add_parser("describe", help="committed offset, log end, lag and read_committed "
                                         "lag per partition, with its consumer "
                                         "(--members: members; --state: the group)")
    groups_option(d)
    view = d.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="per partition (the default)")
    view.add_argument("--members", action="store_true", help="per member")
    view.add_argument("--state", action="store_true", help="the group's state")
    view.add_argument("--topology", action="store_true",
                      help="a streams group's topology description (stored by a broker's "
                           "topology description plugin: none on txbroker)")
    d.add_argument("--verbose", action="store_true",
                   help="with --members: each assignment (consumer protocol: member epoch, "
                        "current and target assignment; streams: also the target tasks); "
                        "with --state: the group's epochs; a share or streams group's "
                        "offsets: the leader epoch")
    r = gsub.add_parser("reset-offsets", help="move a group's committed offsets (a dry run "
                                              "unless --execute)")
    groups_option(r)
    r.add_argument("--topic", "--input-topic", action="append", metavar="TOPIC[:P,P...]",
                   help="a topic, or some of its partitions (repeatable)")
    r.add_argument("--all-topics", "--all-input-topics", action="store_true",
                   help="every partition the group has an offset for")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="the first offset with a timestamp at or after this (local time "
                         "unless a zone is given)")
    to.add_argument("--shift-by", type=int, metavar="N", help="move by N (may be negative)")
    r.add_argument("--dry-run", action="store_true", help="show the new offsets (the default)")
    r.add_argument("--execute", action="store_true", help="commit the new offsets")
    r.add_argument("--delete-internal-topic", action="append", metavar="TOPIC", default=[],
                   help="streams groups, with --execute: delete this topic after the reset "
                        "(repeatable)")
    r.add_argument("--delete-all-internal-topics", action="store_true",
                   help="streams groups, with --execute: delete the group's internal topics "
                        "(its topology's changelog and repartition topics) after the reset")
    do = gsub.add_parser("delete-offsets", help="delete a share or streams group's offsets "
                                                "of topics (no active members)")
    do.add_argument("--group", required=True)
    do.add_argument("--topic", "--input-topic", action="append", help="(repeatable)")
    do.add_argument("--all-topics", "--all-input-topics", action="store_true",
                    help="streams groups: every partition the group has an offset for")
    rm = gsub.add_parser("delete", help="delete groups (no active members) and their offsets")
    groups_option(rm)
    rm.add_argument("--delete-all-internal-topics", action="store_true",
                    help="streams groups: delete the group's internal topics too (its "
                         "topology's changelog and repartition topics)")
    add_client_options_to_subcommands(ls, d, r, do, rm)


def run(args) -> int:
    commands = {"list": cmd_list, "describe": cmd_describe,
                "reset-offsets": cmd_reset_offsets, "delete-offsets": cmd_delete_offsets,
                "delete": cmd_delete}
    return run_tool(args, commands, args.groups_command)
