"""Topics, their partitions (log start, LSO, high watermark, HW − LSO, size, segments),
configs, and each partition's producers (DescribeProducers' view)."""

from __future__ import annotations

from aiohttp import web

from .hanging import open_transactions
from .html import (
    BROKER,
    Raw,
    esc,
    kv,
    layout,
    link,
    ms_time,
    page_params,
    pager,
    seg,
    size,
    table,
    url,
)


def _topic_or_404(broker, request: web.Request):
    name = request.match_info["topic"]
    info = broker.logs.topics.get(name)
    if info is None:
        raise web.HTTPNotFound(text=f"unknown topic {name!r}\n")
    return name, info


def partition_or_404(broker, request: web.Request):
    name, info = _topic_or_404(broker, request)
    try:
        partition = int(request.match_info["partition"])
    except ValueError:
        raise web.HTTPNotFound(text="partition must be a number\n") from None
    plog = broker.logs.get_log(name, partition)
    if plog is None:
        raise web.HTTPNotFound(text=f"unknown partition {name}-{partition}\n")
    return name, info, plog


def partition_href(topic: str, partition: int) -> str:
    return f"/console/topics/{seg(topic)}/{partition}"


async def topics(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    start, limit = page_params(request)
    prefix = request.query.get("q", "")
    internal = request.query.get("internal") == "1"
    names = sorted(n for n, info in broker.logs.topics.items()
                   if n.startswith(prefix) and (internal or not info.internal))
    rows = []
    for name in names[start:start + limit]:
        info = broker.logs.topics[name]
        plogs = [p for p in (broker.logs.get_log(name, i) for i in range(info.partitions))
                 if p is not None]
        held = sum(p.high_watermark - p.last_stable_offset for p in plogs)
        rows.append([link(f"/console/topics/{seg(name)}", name), info.partitions,
                     sum(p.high_watermark for p in plogs), held,
                     sum(p.ongoing_transaction_count() for p in plogs),
                     size(sum(p.size_bytes for p in plogs)),
                     "internal" if info.internal else ""])
    search = Raw(
        f'<form class="filter" method="get"><input name="q" value="{esc(prefix)}" '
        f'placeholder="topic name prefix"><label><input type="checkbox" name="internal" '
        f'value="1"{" checked" if internal else ""}> internal topics</label>'
        f"<button>filter</button></form>")
    body = (search + table(["Topic", "Partitions", "Σ high watermark", "Σ HW − LSO",
                            "Open transactions", "Size", ""], rows, id="topics")
            + pager(request, start, limit, len(names)))
    return layout(request, "Topics", body)


def partition_row(topic: str, p) -> list[object]:
    lso = p.last_stable_offset
    held = p.high_watermark - lso
    return [link(partition_href(topic, p.partition), p.partition), p.log_start_offset, lso,
            p.high_watermark, Raw(f'<span class="{"held" if held else ""}">{held}</span>'),
            p.log_end_offset, size(p.size_bytes), len(p.segments), p.ongoing_transaction_count(),
            link(url(partition_href(topic, p.partition) + "/records"), "records")]


PARTITION_HEADER = ["Partition", "Log start", "LSO", "High watermark", "HW − LSO",
                    "Log end", "Size", "Segments", "Open txns", ""]


async def topic(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    name, info = _topic_or_404(broker, request)
    start, limit = page_params(request)
    parts = range(info.partitions)[start:start + limit]
    rows = [partition_row(name, p) for p in (broker.logs.get_log(name, i) for i in parts)
            if p is not None]
    configs = table(["Config", "Value", "Source"],
                    [[k, v, src] for k, (v, src) in
                     sorted(broker.logs.effective_topic_configs(name).items())], id="configs")
    head = kv([("Topic id", str(info.topic_id)), ("Partitions", info.partitions),
               ("Internal", "yes" if info.internal else "no")])
    body = (f"{head}<h2>Partitions</h2>"
            f"{table(PARTITION_HEADER, rows, id='partitions')}"
            f"{pager(request, start, limit, info.partitions)}<h2>Configs</h2>{configs}")
    return layout(request, f"Topic {name}", body)


async def partition(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    name, _info, plog = partition_or_404(broker, request)
    start, limit = page_params(request)
    lso = plog.last_stable_offset
    offsets = kv([
        ("Log start offset", plog.log_start_offset),
        ("Last stable offset", Raw(f'<span id="lso">{lso}</span>')),
        ("High watermark", Raw(f'<span id="hw">{plog.high_watermark}</span>')),
        ("HW − LSO", Raw(f'<span id="held">{plog.high_watermark - lso}</span>')),
        ("Log end offset", plog.log_end_offset),
        ("Size", size(plog.size_bytes)),
        ("Segments", len(plog.segments)),
    ], id="offsets")
    open_txns = {o.producer_id: o for o in open_transactions(broker, [plog])}
    producers = plog.producers()
    rows = []
    for e in producers[start:start + limit]:
        o = open_txns.get(e.producer_id)
        if o is None:
            status = ""
        elif o.hanging:
            status = Raw('<span class="hanging">hanging</span>')
        else:
            status = "open" + ("" if o.counted else " (not in a coordinator transaction)")
        tid = o.transactional_id if o is not None else None
        rows.append([e.producer_id, e.epoch, e.last_seq, ms_time(e.last_timestamp),
                     e.coordinator_epoch,
                     _or_dash(plog.ongoing_transaction_start(e.producer_id)),
                     link(f"/console/transactions/{seg(tid)}", tid) if tid else "", status])
    body = (f"{offsets}<p>{link(url(partition_href(name, plog.partition) + '/records'), 'Browse records')}"
            f"</p><h2>Producers</h2>"
            + table(["Producer id", "Epoch", "Last sequence", "Last timestamp",
                     "Coordinator epoch", "Open transaction's first offset",
                     "Transactional id", "Transaction"], rows, id="producers")
            + pager(request, start, limit, len(producers)))
    return layout(request, f"Partition {name}-{plog.partition}", body)


def _or_dash(offset: int | None) -> int | str:
    return "-" if offset is None else offset
