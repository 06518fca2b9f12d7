"""Transactions: every transactional id (state, producer id/epoch, partitions, start
time, age against its timeout, coordinator partition), the hanging ones found as
``kafka-transactions find-hanging`` finds them, and one id's detail."""

from __future__ import annotations

import time
from bisect import bisect_left

import txbroker.broker.console.html as h
from aiohttp import web
from txbroker.coordinator.internal_topic import TXN_TOPIC, partition_for

from .hanging import hanging_candidates
from .html import AUTH, BROKER, PAGE_SIZE, Raw, esc, layout, link
from .topics import partition_href

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
STATES = ("Empty", *OPEN_STATES, "CompleteCommit", "CompleteAbort")


def coordinator_partition(broker, transactional_id: str) -> int:
    info = broker.logs.topics.get(TXN_TOPIC)
    partitions = info.partitions if info is not None else \
        broker.config.get("transaction.state.log.num.partitions")
    return partition_for(transactional_id, partitions)


def _partitions_text(topics: dict[str, list[int]], limit: int = 6) -> Raw:
    links = [link(partition_href(t, p), f"{t}-{p}") for t, ps in topics.items() for p in ps]
    more = f" and {len(links) - limit} more" if len(links) > limit else ""
    return Raw(", ".join(links[:limit]) + esc(more))


def _age(d, now: int) -> Raw:
    if d.start_time_ms < 0 or d.state not in OPEN_STATES:
        return Raw("-")
    age = now - d.start_time_ms
    over = age > d.timeout_ms
    return Raw(f'<span class="age{" over" if over else ""}" data-age-ms="{age}">'
               f"{esc(h.duration(age))}</span> / {esc(h.duration(d.timeout_ms))}")


def abort_button(request: web.Request, transactional_id: str) -> Raw:
    auth = request.app[AUTH]
    if not auth.can_act:
        return Raw("")
    return link(f"/console/transactions/{h.seg(transactional_id)}/abort", "abort…",
                **{"class": "button danger abort"})


async def transactions(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    state = broker.transactions
    if not state.loaded:
        return layout(request, "Transactions", "<p>The transaction coordinator is loading "
                      "__transaction_state (COORDINATOR_LOAD_IN_PROGRESS).</p>", status=503)
    start, limit = h.page_params(request)
    wanted = request.query.get("state", "open")
    prefix = request.query.get("q", "")
    listed = _listed(state, wanted, prefix)
    now = int(time.time() * 1000)
    rows = []
    for tid in listed[start:start + limit]:
        d = state.describe(tid)
        if d.error:
            continue  # Dead (expired): shown by no list
        rows.append([link(f"/console/transactions/{h.seg(tid)}", tid, **{"class": "tid"}),
                     Raw(f'<span class="state">{esc(d.state)}</span>'), d.producer_id,
                     d.producer_epoch, _partitions_text(d.topics),
                     h.ms_time(d.start_time_ms) if d.state in OPEN_STATES else "-",
                     _age(d, now), coordinator_partition(broker, tid),
                     abort_button(request, tid) if d.state == "Ongoing" else ""])
    options = "".join(
        f'<option value="{esc(v)}"{" selected" if v == wanted else ""}>{esc(v)}</option>'
        for v in ("open", "all", *STATES))
    search = Raw(f'<form class="filter" method="get"><select name="state">{options}</select>'
                 f'<input name="q" value="{esc(prefix)}" placeholder="transactional id prefix">'
                 f"<button>filter</button></form>")
    counts = ", ".join(f"{n} {esc(s)}" for s, n in sorted(state.state_counts().items()))
    body = (f"<p>{counts or 'no transactional ids'}</p>{hanging_section(request)}"
            f"<h2>Transactional ids</h2>{search}"
            + h.table(["Transactional id", "State", "Producer id", "Epoch", "Partitions",
                     "Started", "Age / timeout", "Coordinator partition", ""], rows,
                    id="transactions")
            + h.pager(request, start, limit, len(listed)))
    return layout(request, "Transactions", body)


def _listed(state, wanted: str, prefix: str) -> list[str]:
    """The ids of the list, sorted: a prefix is two bisections of the sorted ids, a state
    filter one pass over them (100,000 ids: tens of ms, the page's main cost)."""
    ids = state.transactional_ids()
    if prefix:
        ids = ids[bisect_left(ids, prefix):bisect_left(ids, prefix + "\U0010ffff")]
    states = set(OPEN_STATES) if wanted == "open" else None if wanted == "all" else {wanted}
    if states is None:
        return ids
    state_of = state.state_of
    return [tid for tid in ids if (s := state_of(tid)) is not None and s.value in states]


def hanging_section(request: web.Request) -> Raw:
    broker = request.app[BROKER]
    auth = request.app[AUTH]
    found = [o for o in hanging_candidates(broker) if o.hanging]
    rows = []
    for o in found[:PAGE_SIZE]:
        action = ""
        if auth.can_act:
            action = link(f"/console/hanging/abort?topic={h.seg(o.topic)}&partition={o.partition}"
                          f"&producer_id={o.producer_id}", "abort…",
                          **{"class": "button danger abort-hanging"})
        rows.append([link(partition_href(o.topic, o.partition), f"{o.topic}-{o.partition}"),
                     o.producer_id, o.producer_epoch, o.coordinator_epoch, o.first_offset,
                     h.ms_time(o.last_timestamp), o.transactional_id or "-", action])
    more = f"<p>{len(found) - PAGE_SIZE} more not shown.</p>" if len(found) > PAGE_SIZE else ""
    max_ms = broker.config.get("transaction.max.timeout.ms")
    return Raw(
        f"<h2>Hanging transactions</h2><p class=\"note\">Open in a partition, last written "
        f"more than transaction.max.timeout.ms ({esc(h.duration(max_ms))}) ago, and not part "
        f"of its producer's transaction at the coordinator (kafka-transactions.sh "
        f"find-hanging's rule). They hold the partition's LSO back until aborted.</p>"
        + h.table(["Partition", "Producer id", "Epoch", "Coordinator epoch", "Start offset",
                 "Last write", "Transactional id", ""], rows, id="hanging",
                empty="no hanging transactions") + more)


async def transaction(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    tid = request.match_info["tid"]
    state = broker.transactions
    info = state.inspect(tid) if state.loaded else None
    d = state.describe(tid) if state.loaded else None
    if info is None or d is None or d.error:
        raise web.HTTPNotFound(text=f"unknown transactional id {tid!r}\n")
    now = int(time.time() * 1000)
    rows = [("Transactional id", Raw(f'<span class="tid">{esc(tid)}</span>')),
            ("State", Raw(f'<span id="state">{esc(d.state)}</span>')),
            ("Pending state", info["pending_state"] or "-"),
            ("Producer id / epoch", f"{d.producer_id} / {d.producer_epoch}"),
            ("Previous / next producer id",
             f"{info['previous_producer_id']} / {info['next_producer_id']}"),
            ("Transaction timeout", h.duration(d.timeout_ms)),
            ("Started", h.ms_time(d.start_time_ms) if d.state in OPEN_STATES else "-"),
            ("Age / timeout", _age(d, now)),
            ("Last update", h.ms_time(info["last_update_ms"])),
            ("Markers in flight", "yes" if info["markers_in_flight"] else "no"),
            ("Client transaction version", info["client_transaction_version"]),
            ("Coordinator partition",
             f"{TXN_TOPIC}-{coordinator_partition(broker, tid)}"),
            ("Partitions", _partitions_text(d.topics, limit=PAGE_SIZE))]
    action = abort_button(request, tid) if d.state == "Ongoing" else ""
    return layout(request, "Transaction", f"{h.kv(rows, id='transaction')}<p>{action}</p>")
