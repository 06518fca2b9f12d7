"""Server-rendered HTML for the console: every value goes through ``esc`` (or ``attr``)
on its way into a page, so a transactional id, group id, header or record value with
HTML in it renders as text. Pages are plain strings: no template engine to ship."""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlencode

from aiohttp import web

from ..storage_status import describe, storage_status

# Rows on one page of any list, and the most a ``limit`` parameter may ask for: a page
# costs the same with 1,000 partitions or 100,000 transactional ids.
PAGE_SIZE = 100
MAX_PAGE_SIZE = 500

NAV = (("/", "Overview"), ("/console/topics", "Topics"),
       ("/console/transactions", "Transactions"), ("/console/groups", "Consumer groups"),
       ("/console/security", "ACLs & users"))


class Raw(str):
    """Markup built here (already escaped): ``cell`` passes it through as is."""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def url(path: str, **params: object) -> str:
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return path + ("?" + query if query else "")


def seg(name: str) -> str:
    """One path segment (a topic name, transactional id or group id) for a URL."""
    return quote(name, safe="")


def link(href: str, text: object, **attrs: str) -> Raw:
    extra = "".join(f' {k}="{esc(v)}"' for k, v in attrs.items())
    return Raw(f'<a href="{esc(href)}"{extra}>{esc(text)}</a>')


def cell(value: object) -> str:
    return value if isinstance(value, Raw) else esc(value)


def table(header: Sequence[str], rows: Iterable[Sequence[object]], *, id: str = "",
          empty: str = "none") -> Raw:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(header)}" class="empty">{esc(empty)}</td></tr>'
    ident = f' id="{esc(id)}"' if id else ""
    return Raw(f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def kv(rows: Iterable[tuple[str, object]], *, id: str = "") -> Raw:
    ident = f' id="{esc(id)}"' if id else ""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{cell(v)}</td></tr>" for k, v in rows)
    return Raw(f'<table class="kv"{ident}>{body}</table>')


def page_params(request: web.Request) -> tuple[int, int]:
    """(start, limit) from ``?start=&limit=``, clamped."""
    try:
        start = max(0, int(request.query.get("start", "0")))
    except ValueError:
        start = 0
    try:
        limit = min(MAX_PAGE_SIZE, max(1, int(request.query.get("limit", str(PAGE_SIZE)))))
    except ValueError:
        limit = PAGE_SIZE
    return start, limit


def pager(request: web.Request, start: int, limit: int, total: int) -> Raw:
    """Previous/next links keeping the other query parameters."""
    if total <= limit and start == 0:
        return Raw(f'<p class="pager">{total} shown</p>')
    params = {k: v for k, v in request.query.items() if k not in ("start", "limit")}
    parts = [f"{start + 1 if total else 0}–{min(start + limit, total)} of {total}"]
    if start > 0:
        parts.insert(0, str(link(url(request.path, **params, start=max(0, start - limit),
                                     limit=limit), "« previous", **{"class": "prev"})))
    if start + limit < total:
        parts.append(str(link(url(request.path, **params, start=start + limit, limit=limit),
                              "next »", **{"class": "next"})))
    return Raw('<p class="pager">' + " ".join(parts) + "</p>")


def ms_time(ms: int) -> str:
    if ms < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def duration(ms: float) -> str:
    if ms < 0:
        return "-"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


_HERE = ' class="here"'
REFRESH_SECONDS = ("1", "2", "5", "10", "30")


def layout(request: web.Request, title: str, body: str, *, status: int = 200) -> web.Response:
    here = request.path
    nav = "".join(
        f'<a href="{href}"{_HERE if here == href or (href != "/" and here.startswith(href)) else ""}>'
        f"{esc(text)}</a>" for href, text in NAV)
    flash = request.query.get("flash")
    notice = f'<p class="flash" id="flash">{esc(flash)}</p>' if flash else ""
    # ?refresh=N reloads the page every N seconds (a <meta> refresh: no script), to watch
    # a pipeline's transactions; the header's link turns it on and off.
    refresh = request.query.get("refresh", "")
    refresh = refresh if refresh in REFRESH_SECONDS else ""
    params = {k: v for k, v in request.query.items() if k not in ("refresh", "flash")}
    toggle = link(url(here, **params) if refresh else url(here, **params, refresh="2"),
                  "auto-refresh: on" if refresh else "auto-refresh: off",
                  **{"class": "refresh", "id": "refresh"})
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">{meta}'
            f"<title>{esc(title)} · txbroker</title>"
            f'<link rel="stylesheet" href="/console/static/console.css">'
            f'<script src="/console/static/console.js" defer></script></head>'
            f'<body><header><span class="brand">txbroker</span><nav>{nav}</nav>{toggle}'
            f"</header>"
            f"<main>{storage_banner(request)}<h1>{esc(title)}</h1>{notice}{body}</main>"
            f"</body></html>")
    return web.Response(text=page, status=status, content_type="text/html", charset="utf-8",
                        headers=SECURITY_HEADERS)


def storage_banner(request: web.Request) -> str:
    """On every page while the data directory is full, read-only or failing, or a
    partition is offline (broker/storage_status.py): what an operator must see first.
    Not on the login page, which strangers see."""
    broker = request.app.get(BROKER)
    if broker is None or request.path.startswith("/console/login"):
        return ""
    status = storage_status(broker.logs)
    if status["status"] == "ok":
        return ""
    items = "".join(f"<li>{esc(line)}</li>" for line in describe(status))
    return (f'<div class="banner" id="storage-banner" role="alert"><strong>Storage degraded'
            f"</strong>: writes to the affected partitions are refused with "
            f"KAFKA_STORAGE_ERROR (clients retry); nothing acknowledged is lost. See "
            f"docs/operations.md, \"A full or failing disk\".<ul>{items}</ul></div>")


# The pages load only their own assets: an injected script could not run (no inline
# scripts allowed), and no page can be framed by another site (clickjacking the abort).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


# The application's keys: the running broker (broker/server.py's Broker) and the
# console's ConsoleAuth (broker/console/auth.py).
BROKER: web.AppKey = web.AppKey("console.broker", object)
AUTH: web.AppKey = web.AppKey("console.auth", object)
