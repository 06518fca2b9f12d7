"""Streams groups (KIP-1071) in the console: on the groups page a table of streams groups
(state, members, group epoch, tasks), and a streams group's page with its topology
(subtopologies and their source, repartition and changelog topics) and whether it is
ready, its members with their active, standby and warm-up tasks (current and target),
and the group's committed offsets and lag (rendered by ``groups.py``).

Reads the group coordinator's streams groups through ``coordinator/streams/view.py``;
while streams groups are turned off (``streams.version`` 0) the page says so.
"""

from __future__ import annotations

from aiohttp import web
from txbroker.coordinator.streams.view import TasksPicture, streams_group_picture, task_count

from ..features import STREAMS_VERSION
from .html import BROKER, Raw, esc, kv, layout, link, page_params, seg, table

# Tasks of one kind shown per member before "and N more".
TASKS_SHOWN = 20


def streams_on(broker) -> bool:
    return broker.features.level(STREAMS_VERSION) >= 1


def streams_group_ids(broker) -> list[str]:
    groups = broker.groups.streams.groups
    return sorted(gid for gid in groups if broker.groups.is_streams_group(gid))


def groups_section(broker, request: web.Request) -> str:
    """The groups page's streams-group table (the first page of them, by the same filter)."""
    if not streams_on(broker):
        return ('<h2>Streams groups</h2><p class="note" id="streams-groups-off">Streams '
                "groups are off (<code>streams.version</code> 0; "
                "docs/consumer-groups.md).</p>")
    start, limit = page_params(request)
    prefix = request.query.get("q", "")
    ids = [g for g in streams_group_ids(broker) if g.startswith(prefix)]
    rows = []
    for gid in ids[start:start + limit]:
        g = broker.groups.streams.get(gid)
        rows.append([link(f"/console/groups/{seg(gid)}", gid, **{"class": "streams-group"}),
                     g.state, len(g.p.members), g.p.group_epoch, task_count(g)])
    return ("<h2>Streams groups</h2>"
            + table(["Group", "State", "Members", "Group epoch", "Tasks"], rows,
                    id="streams-groups")
            + (f"<p>{len(ids) - start - limit} more streams groups not shown.</p>"
               if len(ids) > start + limit else ""))


def _shown(tasks: tuple[tuple[str, int], ...]) -> str:
    text = ", ".join(f"{s}_{p}" for s, p in tasks[:TASKS_SHOWN])
    if len(tasks) > TASKS_SHOWN:
        text += f" and {len(tasks) - TASKS_SHOWN} more"
    return text or "-"


def _tasks_cells(t: TasksPicture, kind: str) -> list[Raw]:
    return [Raw(f'<span class="{kind}-{name}">{esc(_shown(getattr(t, name)))}</span>')
            for name in ("active", "standby", "warmup")]


def streams_group(request: web.Request, gid: str, offsets_html: str) -> web.Response:
    """A streams group's page; ``offsets_html``: its committed offsets and lag."""
    broker = request.app[BROKER]
    g = broker.groups.streams.get(gid)
    if g is None:
        raise web.HTTPNotFound(text=f"unknown group {gid!r}\n")
    _start, limit = page_params(request)
    picture = streams_group_picture(g, limit)
    head = kv([("Group id", Raw(f'<span class="group">{esc(gid)}</span>')),
               ("State", picture.state), ("Type", "streams (KIP-1071)"),
               ("Group epoch", picture.group_epoch),
               ("Assignment epoch", picture.assignment_epoch),
               ("Topology epoch", "-" if picture.topology_epoch is None
                else picture.topology_epoch),
               ("Topology", Raw(f'<span id="topology-status">{esc(picture.topology_status)}'
                                "</span>")),
               ("Members", len(g.p.members)), ("Tasks", task_count(g))])
    subs = [[s.subtopology_id, ", ".join(s.source_topics) or "-",
             ", ".join(s.repartition_source_topics) or "-",
             ", ".join(s.repartition_sink_topics) or "-",
             ", ".join(s.changelog_topics) or "-", "-" if s.tasks is None else s.tasks]
            for s in picture.subtopologies]
    members = [[m.member_id, m.instance_id or "-", m.client_id, m.client_host, m.process_id,
                m.member_epoch, *_tasks_cells(m.current, "current"),
                *_tasks_cells(m.target, "target"),
                _shown(m.revoking.active + m.revoking.standby + m.revoking.warmup)]
               for m in picture.members]
    body = (f"{head}<h2>Topology</h2>"
            + table(["Subtopology", "Source topics", "Repartition source topics",
                     "Repartition sink topics", "Changelog topics", "Tasks"], subs,
                    id="subtopologies")
            + "<h2>Members</h2><p class=\"note\">Tasks as subtopology_partition. Current: "
            "what the member holds (with what it is still revoking); target: what the "
            "assignor gave it. A task moves only once its previous owner revoked it.</p>"
            + table(["Member id", "Instance id", "Client id", "Host", "Process",
                     "Member epoch", "Active", "Standby", "Warm-up", "Target active",
                     "Target standby", "Target warm-up", "Revoking"], members,
                    id="members")
            + (f"<p>{len(g.p.members) - limit} more members not shown.</p>"
               if len(g.p.members) > limit else "")
            + offsets_html)
    return layout(request, "Streams group", body)
