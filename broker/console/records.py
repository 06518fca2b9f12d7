"""The record browser of one partition: what a consumer at either isolation level gets,
batch by batch, with control markers and records of aborted transactions shown as such,
key and value as text, JSON or hex, headers, and each batch's producer id, epoch and
sequence. Bounded: at most MAX_RECORDS records from at most MAX_READ_BYTES of log per
page (a compressed batch is decompressed whole, as a consumer would)."""

from __future__ import annotations

import json

from aiohttp import web
from txbroker.protocol.records import (
    ControlType,
    decode_records,
    iter_batches,
    read_control_type,
)

from .html import BROKER, Raw, esc, kv, layout, link, ms_time, table, url
from .topics import partition_href, partition_or_404

MAX_RECORDS = 200
DEFAULT_RECORDS = 50
MAX_READ_BYTES = 1 << 20
READ_CHUNK = 256 * 1024
# Bytes of a key or value shown (the rest is cut, with a note).
SHOWN_BYTES = 2048
FORMATS = ("text", "json", "hex")
ISOLATION = ("read_committed", "read_uncommitted")


def render_bytes(data: bytes | None, fmt: str) -> Raw:
    if data is None:
        return Raw('<span class="null">null</span>')
    cut = data[:SHOWN_BYTES]
    more = f' <span class="cut">(+{len(data) - SHOWN_BYTES} bytes)</span>' \
        if len(data) > SHOWN_BYTES else ""
    if fmt == "hex":
        return Raw(f'<code class="hex">{esc(cut.hex(" "))}</code>{more}')
    text = cut.decode("utf-8", "replace")
    if fmt == "json":
        try:
            return Raw(f'<pre class="json">{esc(json.dumps(json.loads(data), indent=1))}'
                       f"</pre>")
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass  # not JSON: shown as text
    return Raw(f'<span class="text">{esc(text)}</span>{more}')


def _int(request: web.Request, name: str) -> int | None:
    try:
        return int(request.query[name])
    except (KeyError, ValueError):
        return None


def read_rows(plog, start: int, end: int, limit: int, committed: bool
              ) -> tuple[list[dict], int, int]:
    """(rows, hidden count, next offset): rows of records and markers in [start, end)."""
    aborted = plog.aborted_transactions(start, end) if end > start else []
    rows: list[dict] = []
    hidden = 0
    pos = start
    read = 0
    while pos < end and len(rows) < limit and read < MAX_READ_BYTES:
        result = plog.read(pos, READ_CHUNK, max_offset=end, min_one=True)
        if not result.data:
            break
        data = bytes(result.data)
        read += len(data)
        for at, header in iter_batches(data):
            last = header.last_offset
            if last < pos:
                continue
            batch_info = {"producer_id": header.producer_id, "epoch": header.producer_epoch,
                          "sequence": header.base_sequence,
                          "transactional": header.is_transactional}
            if header.is_control:
                if committed:
                    hidden += 1
                else:
                    ctype = read_control_type(data, at)
                    rows.append({"kind": "marker", "offset": header.base_offset,
                                 "timestamp": header.max_timestamp,
                                 "marker": ctype.name if ctype is not None else "EMPTY",
                                 **batch_info})
                pos = last + 1
                continue
            is_aborted = header.is_transactional and any(
                a.producer_id == header.producer_id
                and a.first_offset <= header.base_offset <= a.last_offset for a in aborted)
            first_open = plog.ongoing_transaction_start(header.producer_id)
            is_open = first_open is not None and header.base_offset >= first_open
            for i, rec in enumerate(decode_records(data, at)):
                if rec.offset < pos or rec.offset >= end:
                    continue
                if is_aborted and committed:
                    hidden += 1
                    continue
                if len(rows) >= limit:
                    break
                rows.append({"kind": "aborted" if is_aborted else
                             "open" if header.is_transactional and is_open else "record",
                             "offset": rec.offset, "timestamp": rec.timestamp,
                             "key": rec.key, "value": rec.value, "headers": rec.headers,
                             **batch_info,
                             "sequence": header.base_sequence + i
                             if header.base_sequence >= 0 else -1})
            if len(rows) >= limit:
                pos = rows[-1]["offset"] + 1
                break
            pos = last + 1
        else:
            pos = max(pos, result.next_offset)
    return rows, hidden, min(pos, end)


KINDS = {"aborted": Raw('<span class="aborted">aborted</span>'),
         "open": Raw('<span class="open">open transaction</span>')}


def _row(r: dict, fmt: str) -> list[object]:
    who = f"{r['producer_id']} / {r['epoch']} / {r['sequence']}" \
        if r["producer_id"] >= 0 else "-"
    if r["kind"] == "marker":
        marker = f"{ControlType[r['marker']].name} marker" if r["marker"] in \
            ControlType.__members__ else "control batch"
        return [r["offset"], ms_time(r["timestamp"]),
                Raw(f'<span class="marker">{esc(marker)}</span>'), "", "", "", who]
    kind = KINDS.get(r["kind"]) or ("transactional" if r["transactional"] else "")
    headers = Raw("<br>".join(f"{esc(k)}: {render_bytes(v, fmt)}" for k, v in r["headers"]))
    return [r["offset"], ms_time(r["timestamp"]), kind, render_bytes(r["key"], fmt),
            render_bytes(r["value"], fmt), headers, who]


async def records(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    name, _info, plog = partition_or_404(broker, request)
    isolation = request.query.get("isolation", "read_committed")
    if isolation not in ISOLATION:
        isolation = "read_committed"
    fmt = request.query.get("format", "text")
    if fmt not in FORMATS:
        fmt = "text"
    limit = min(MAX_RECORDS, max(1, _int(request, "limit") or DEFAULT_RECORDS))
    committed = isolation == "read_committed"
    end = plog.last_stable_offset if committed else plog.high_watermark
    offset = _int(request, "offset")
    timestamp = _int(request, "timestamp")
    note = ""
    if offset is None and timestamp is not None:
        found = plog.offset_for_timestamp(timestamp)
        offset = found[0] if found is not None else end
        note = f"First record at or after timestamp {timestamp}: offset {offset}."
    if offset is None:
        offset = max(plog.log_start_offset, end - limit)
    offset = max(offset, plog.log_start_offset)
    rows, hidden, next_offset = read_rows(plog, offset, end, limit, committed)
    base = partition_href(name, plog.partition) + "/records"
    switch = "".join(
        str(link(url(base, offset=offset, isolation=iso, format=fmt, limit=limit), iso,
                 **{"class": "iso here" if iso == isolation else "iso", "id": iso}))
        for iso in ISOLATION)
    formats = " ".join(
        str(link(url(base, offset=offset, isolation=isolation, format=f, limit=limit), f,
                 **{"class": "fmt here" if f == fmt else "fmt"})) for f in FORMATS)
    search = Raw(
        f'<form class="filter" method="get"><input type="hidden" name="isolation" '
        f'value="{esc(isolation)}"><input type="hidden" name="format" value="{esc(fmt)}">'
        f'<input name="offset" placeholder="offset" size="10">'
        f'<button>go to offset</button></form>'
        f'<form class="filter" method="get"><input type="hidden" name="isolation" '
        f'value="{esc(isolation)}"><input type="hidden" name="format" value="{esc(fmt)}">'
        f'<input name="timestamp" placeholder="timestamp (ms)" size="14">'
        f'<button>go to timestamp</button></form>')
    head = kv([("Isolation", Raw(f'<span class="switch">{switch}</span>')),
               ("Show as", Raw(formats)),
               ("Offsets", f"log start {plog.log_start_offset}, LSO "
                           f"{plog.last_stable_offset}, high watermark {plog.high_watermark}"),
               ("Reading", f"from {offset} up to {end} "
                           f"({'LSO' if committed else 'high watermark'})")])
    hidden_note = (f"<p class=\"note\" id=\"hidden\">{hidden} control markers and records of "
                   f"aborted transactions hidden (read_committed).</p>" if hidden else "")
    nav = []
    if offset > plog.log_start_offset:
        nav.append(str(link(url(base, offset=max(plog.log_start_offset, offset - limit),
                                isolation=isolation, format=fmt, limit=limit), "« earlier")))
    if next_offset < end:
        nav.append(str(link(url(base, offset=next_offset, isolation=isolation, format=fmt,
                                limit=limit), "later »", **{"class": "next"})))
    body = (f"{head}{search}<p class=\"note\">{esc(note)}</p>{hidden_note}"
            + table(["Offset", "Timestamp", "Kind", "Key", "Value", "Headers",
                     "Producer id / epoch / sequence"], [_row(r, fmt) for r in rows],
                    id="records", empty="no records in this range")
            + f'<p class="pager">{" ".join(nav)}</p>')
    return layout(request, f"Records of {name}-{plog.partition}", body)
