"""Share groups (KIP-932) in the console: on the groups page a table of share groups
(state, members, share-partitions, lag), and a share group's page with its members and
assignments and, per share-partition, the start and end offsets of its in-flight window,
its records by state (available / acquired / acknowledged / archived), their delivery
counts and the lag (what kafka-share-groups.sh --describe shows as LAG).

Reads the share coordinator's state through ``coordinator/share/view.py``; never builds
the share coordinator while share groups are off (``share.version`` 0): the page says
they are off instead.
"""

from __future__ import annotations

from aiohttp import web
from txbroker.coordinator.share.view import PartitionPicture, share_group_picture, start_offsets

from ..features import SHARE_VERSION
from .html import BROKER, Raw, esc, kv, layout, link, page_params, pager, seg, table
from .topics import partition_href


def share_coordinator(broker):
    """The share coordinator, or None while share groups are off."""
    if broker.features.level(SHARE_VERSION) < 1:
        return None
    return broker.shares  # on: built on first use, as a ListGroups would


def _lag(broker, topic: str, partition: int, start: int, complete: int) -> int | None:
    """Kafka's share-partition lag: records from the start offset to the high watermark
    not yet acknowledged or archived (None: unknown)."""
    plog = broker.logs.get_log(topic, partition)
    if plog is None or complete < 0:
        return None
    return plog.high_watermark - start - complete


def groups_section(broker, request: web.Request) -> str:
    """The groups page's share-group table (the first page of them, by the same filter)."""
    shares = share_coordinator(broker)
    if shares is None:
        return ('<h2>Share groups</h2><p class="note" id="share-groups-off">Share groups are '
                "off (<code>share.version</code> 0; docs/consumer-groups.md).</p>")
    start, limit = page_params(request)
    prefix = request.query.get("q", "")
    listing = sorted((g, s) for g, s in shares.listing() if g.startswith(prefix))
    offsets = start_offsets(shares.partitions, shares.persister.latest)
    names = {tid: name for name, (tid, _) in shares.topic_image().items()}
    rows = []
    for gid, state in listing[start:start + limit]:
        g = shares.groups.groups.get(gid)
        parts = {k: v for k, v in offsets.get(gid, {}).items() if k[0] in names}
        lags = [_lag(broker, names[tid], p, s, c) for (tid, p), (s, c) in parts.items()]
        rows.append([link(f"/console/groups/{seg(gid)}", gid, **{"class": "share-group"}),
                     state, len(g.members) if g is not None else 0, len(parts),
                     "-" if None in lags else sum(lags)])
    return ("<h2>Share groups</h2>"
            + table(["Group", "State", "Members", "Share-partitions", "Lag"], rows,
                    id="share-groups")
            + (f"<p>{len(listing) - start - limit} more share groups not shown.</p>"
               if len(listing) > start + limit else ""))


def _deliveries(p: PartitionPicture) -> str:
    """The delivery-count histogram: ``count×records``, never-delivered offsets left out."""
    return ", ".join(f"{count}×{n}" for count, n in p.delivery_counts.items() if count) or "-"


async def share_group(request: web.Request, shares, gid: str) -> web.Response:
    broker = request.app[BROKER]
    start, limit = page_params(request)
    g = shares.groups.groups.get(gid)
    if g is None:
        raise web.HTTPNotFound(text=f"unknown group {gid!r}\n")
    names = {tid: name for name, (tid, _) in shares.topic_image().items()}
    # The first start + limit pictures: a page costs its partitions' runs, no more.
    picture, total = share_group_picture(g, shares.partitions, shares.persister.latest, names,
                                         limit=start + limit)
    head = kv([("Group id", Raw(f'<span class="group">{esc(gid)}</span>')),
               ("State", picture.state), ("Type", "share (KIP-932)"), ("Assignor", "simple"),
               ("Group epoch", picture.group_epoch),
               ("Assignment epoch", picture.assignment_epoch),
               ("Members", len(picture.members))])
    members = [[m.member_id, m.client_id, m.client_host, m.member_epoch,
                ", ".join(m.subscribed_topic_names) or "-",
                ", ".join(f"{t}-{p}" for t, p in m.assignment) or "-"]
               for m in picture.members[:limit]]
    rows = []
    for p in picture.partitions[start:start + limit]:
        plog = broker.logs.get_log(p.topic, p.partition)
        lag = _lag(broker, p.topic, p.partition, p.start_offset, p.complete)
        rows.append([link(partition_href(p.topic, p.partition), f"{p.topic}-{p.partition}"),
                     p.start_offset, p.end_offset,
                     plog.high_watermark if plog is not None else "-",
                     Raw(f'<span class="share-lag">{"-" if lag is None else lag}</span>'),
                     p.states["available"], p.states["acquired"], p.states["acknowledged"],
                     p.states["archiving"] + p.states["archived"],
                     _deliveries(p), p.max_delivery_count,
                     "" if p.loaded else "not loaded since the restart"])
    body = (f"{head}<h2>Members</h2>"
            + table(["Member id", "Client id", "Host", "Member epoch", "Subscribed topics",
                     "Assignment"], members, id="members")
            + (f"<p>{len(picture.members) - limit} more members not shown.</p>"
               if len(picture.members) > limit else "")
            + "<h2>Share-partitions</h2><p class=\"note\">The in-flight window runs from the "
            "start offset (the first record not yet acknowledged or archived) to the end "
            "offset (exclusive). Its records by state; delivery counts as count×records. "
            "Lag: high watermark − start offset − records of the window acknowledged or "
            "archived, as kafka-share-groups.sh shows it.</p>"
            + table(["Partition", "Start offset", "End offset", "High watermark", "Lag",
                     "Available", "Acquired", "Acknowledged", "Archived",
                     "Delivery counts", "Max delivery count", ""], rows,
                    id="share-partitions")
            + pager(request, start, limit, total))
    return layout(request, "Share group", body)
