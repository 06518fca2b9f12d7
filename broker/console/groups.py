"""Consumer groups: state, members and their assignments, committed offsets, and the
lag against the high watermark (what kafka-consumer-groups.sh shows) and against the
last stable offset (what a read_committed consumer can still read)."""

from __future__ import annotations

from aiohttp import web
from txbroker.protocol.consumer_protocol import decode_consumer_assignment

from .html import BROKER, Raw, esc, kv, layout, link, page_params, pager, seg, table
from .topics import partition_href

# Partitions of one member's assignment shown before "and N more".
ASSIGNMENT_SHOWN = 20


def group_ids(broker) -> list[str]:
    groups = broker.groups
    return sorted(set(groups.state.group_ids()) | set(groups.offsets.groups()))


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
        d = broker.groups.state.describe(gid)
        rows_lag = lags(broker, gid)
        rows.append([link(f"/console/groups/{seg(gid)}", gid, **{"class": "group"}), d.state,
                     d.protocol_type or "-", len(d.members), len(rows_lag),
                     sum(max(0, hw - c) for _, _, c, hw, _, _ in rows_lag),
                     sum(max(0, lso - c) for _, _, c, _, lso, _ in rows_lag)])
    search = Raw(f'<form class="filter" method="get"><input name="q" value="{esc(prefix)}" '
                 f'placeholder="group id prefix"><button>filter</button></form>')
    body = (search + table(["Group", "State", "Protocol type", "Members",
                            "Committed partitions", "Lag (HW)", "Lag (LSO)"], rows,
                           id="groups")
            + pager(request, start, limit, len(ids)))
    return layout(request, "Consumer groups", body)


async def group(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    gid = request.match_info["group"]
    d = broker.groups.state.describe(gid)
    committed = lags(broker, gid)
    if not d.exists and not committed:
        raise web.HTTPNotFound(text=f"unknown group {gid!r}\n")
    start, limit = page_params(request)
    members = []
    for m in d.members[:limit]:
        assigned = decode_consumer_assignment(m.assignment) \
            if d.protocol_type == "consumer" else []
        shown = ", ".join(f"{t}-{p}" for t, p in assigned[:ASSIGNMENT_SHOWN])
        if len(assigned) > ASSIGNMENT_SHOWN:
            shown += f" and {len(assigned) - ASSIGNMENT_SHOWN} more"
        members.append([m.member_id, m.group_instance_id or "-", m.client_id, m.client_host,
                        shown or "-"])
    rows = [[link(partition_href(t, p), f"{t}-{p}"), c, hw, lso,
             Raw(f'<span class="lag-hw">{max(0, hw - c)}</span>'),
             Raw(f'<span class="lag-lso">{max(0, lso - c)}</span>'),
             "pending (transactional)" if pending else ""]
            for t, p, c, hw, lso, pending in committed[start:start + limit]]
    head = kv([("Group id", Raw(f'<span class="group">{esc(gid)}</span>')),
               ("State", d.state), ("Protocol type", d.protocol_type or "-"),
               ("Protocol", d.protocol_data or "-"), ("Members", len(d.members))])
    body = (f"{head}<h2>Members</h2>"
            + table(["Member id", "Instance id", "Client id", "Host", "Assignment"], members,
                    id="members")
            + (f"<p>{len(d.members) - limit} more members not shown.</p>"
               if len(d.members) > limit else "")
            + "<h2>Committed offsets</h2><p class=\"note\">Lag (HW): high watermark − "
            "committed, as kafka-consumer-groups.sh shows it. Lag (LSO): last stable "
            "offset − committed, what a read_committed consumer can read now; the rest is "
            "held back by open transactions.</p>"
            + table(["Partition", "Committed", "High watermark", "LSO", "Lag (HW)",
                     "Lag (LSO)", ""], rows, id="offsets")
            + pager(request, start, limit, len(committed)))
    return layout(request, "Consumer group", body)
