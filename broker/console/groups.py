"""Consumer groups: state, members and their assignments, committed offsets, and the
lag against the high watermark (what kafka-consumer-groups.sh shows) and against the
last stable offset (what a read_committed consumer can still read). Groups of both
protocols: a consumer-protocol group (KIP-848) shows its group and assignment epochs,
its assignor and each member's epoch, current and target assignment. Share groups
(KIP-932) are listed and shown by ``share_groups.py``, streams groups (KIP-1071) by
``streams_groups.py``."""

from __future__ import annotations

from aiohttp import web
from txbroker.protocol.consumer_protocol import decode_consumer_assignment

from .html import BROKER, Raw, esc, kv, layout, link, page_params, pager, seg, table
from .share_groups import groups_section, share_coordinator, share_group
from .streams_groups import groups_section as streams_section
from .streams_groups import streams_group, streams_group_ids
from .topics import partition_href

# Partitions of one member's assignment shown before "and N more".
ASSIGNMENT_SHOWN = 20


def group_ids(broker) -> list[str]:
    groups = broker.groups
    return sorted((set(groups.state.group_ids()) | set(groups.consumer.groups)
                   | set(groups.offsets.groups())) - set(streams_group_ids(broker)))


def _partitions(assignment, names) -> list[tuple[str, int]]:
    """A consumer-protocol assignment (topic id -> partitions) as (name, partition)."""
    return sorted((names[tid], p) for tid, ps in assignment.items() if tid in names for p in ps)


def _shown(assigned: list[tuple[str, int]]) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in assigned[:ASSIGNMENT_SHOWN])
    if len(assigned) > ASSIGNMENT_SHOWN:
        shown += f" and {len(assigned) - ASSIGNMENT_SHOWN} more"
    return shown or "-"


def _summary(broker, gid: str) -> tuple[str, str, int]:
    """(state, protocol type, member count) of a group of either protocol."""
    g = broker.groups.consumer.groups.get(gid)
    if g is not None:
        return g.state, "consumer (KIP-848)", len(g.members)
    d = broker.groups.describe(gid)
    return d.state, d.protocol_type or "-", len(d.members)


def lags(broker, group_id: str) -> list[tuple[str, int, int, int, int, bool]]:
    """(topic, partition, committed, high watermark, LSO, pending transactional commit)
    per committed partition that still exists."""
    offsets = broker.groups.offsets
    out = []
    for (topic, partition), committed in sorted(offsets.group_offsets(group_id).items()):
        plog = broker.logs.get_log(topic, partition)
        if plog is None:
            continue
        out.append((topic, partition, committed.offset, plog.high_watermark,
                    plog.last_stable_offset, offsets.has_pending(group_id, topic, partition)))
    return out


async def groups(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    start, limit = page_params(request)
    prefix = request.query.get("q", "")
    ids = [g for g in group_ids(broker) if g.startswith(prefix)]
    rows = []
    for gid in ids[start:start + limit]:
        state, protocol_type, members = _summary(broker, gid)
        rows_lag = lags(broker, gid)
        rows.append([link(f"/console/groups/{seg(gid)}", gid, **{"class": "group"}), state,
                     protocol_type, members, len(rows_lag),
                     sum(max(0, hw - c) for _, _, c, hw, _, _ in rows_lag),
                     sum(max(0, lso - c) for _, _, c, _, lso, _ in rows_lag)])
    search = Raw(f'<form class="filter" method="get"><input name="q" value="{esc(prefix)}" '
                 f'placeholder="group id prefix"><button>filter</button></form>')
    body = (search + table(["Group", "State", "Protocol type", "Members",
                            "Committed partitions", "Lag (HW)", "Lag (LSO)"], rows,
                           id="groups")
            + pager(request, start, limit, len(ids))
            + groups_section(broker, request)
            + streams_section(broker, request))
    return layout(request, "Consumer groups", body)


async def group(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    gid = request.match_info["group"]
    shares = share_coordinator(broker)
    if shares is not None and shares.is_share_group(gid):
        return await share_group(request, shares, gid)
    start, limit = page_params(request)
    committed = lags(broker, gid)
    if broker.groups.is_streams_group(gid):
        return streams_group(request, gid, _offsets_html(request, committed, start, limit))
    cg = broker.groups.consumer.groups.get(gid)
    d = broker.groups.describe(gid)
    if cg is None and not d.exists and not committed:
        raise web.HTTPNotFound(text=f"unknown group {gid!r}\n")
    if cg is not None:
        head, members, member_header, count = _consumer_group(broker, cg, limit)
    else:
        members = []
        for m in d.members[:limit]:
            assigned = decode_consumer_assignment(m.assignment) \
                if d.protocol_type == "consumer" else []
            members.append([m.member_id, m.group_instance_id or "-", m.client_id,
                            m.client_host, _shown(assigned)])
        member_header = ["Member id", "Instance id", "Client id", "Host", "Assignment"]
        count = len(d.members)
        head = kv([("Group id", Raw(f'<span class="group">{esc(gid)}</span>')),
                   ("State", d.state), ("Protocol type", d.protocol_type or "-"),
                   ("Protocol", d.protocol_data or "-"), ("Members", count)])
    body = (f"{head}<h2>Members</h2>"
            + table(member_header, members, id="members")
            + (f"<p>{count - limit} more members not shown.</p>" if count > limit else "")
            + _offsets_html(request, committed, start, limit))
    return layout(request, "Consumer group", body)


def _offsets_html(request: web.Request, committed: list, start: int, limit: int) -> str:
    """A group's committed offsets with both lags, one page of them."""
    rows = [[link(partition_href(t, p), f"{t}-{p}"), c, hw, lso,
             Raw(f'<span class="lag-hw">{max(0, hw - c)}</span>'),
             Raw(f'<span class="lag-lso">{max(0, lso - c)}</span>'),
             "pending (transactional)" if pending else ""]
            for t, p, c, hw, lso, pending in committed[start:start + limit]]
    return ("<h2>Committed offsets</h2><p class=\"note\">Lag (HW): high watermark − "
            "committed, as kafka-consumer-groups.sh shows it. Lag (LSO): last stable "
            "offset − committed, what a read_committed consumer can read now; the rest is "
            "held back by open transactions.</p>"
            + table(["Partition", "Committed", "High watermark", "LSO", "Lag (HW)",
                     "Lag (LSO)", ""], rows, id="offsets")
            + pager(request, start, limit, len(committed)))


def _consumer_group(broker, g, limit: int):
    """A consumer-protocol group's head, member rows (up to ``limit``), their header and
    the member count. The target assignment differs from the current one while the
    group reconciles (a partition is revoked from its owner before it moves)."""
    coordinator = broker.groups
    names = coordinator.topic_names()
    head = kv([("Group id", Raw(f'<span class="group">{esc(g.group_id)}</span>')),
               ("State", g.state), ("Protocol type", "consumer (KIP-848)"),
               ("Assignor", coordinator.consumer.assignor_of(g)),
               ("Group epoch", g.group_epoch), ("Assignment epoch", g.assignment_epoch),
               ("Members", len(g.members))])
    rows = []
    for m in list(g.members.values())[:limit]:
        s = m.subscription
        rows.append([m.member_id, s.instance_id or "-", s.client_id, s.client_host,
                     m.member_epoch, _shown(_partitions(m.assigned, names)),
                     _shown(_partitions(g.target.get(m.member_id, {}), names))])
    header = ["Member id", "Instance id", "Client id", "Host", "Member epoch", "Assignment",
              "Target assignment"]
    return head, rows, header, len(g.members)
