"""The web console, served by the admin HTTP endpoint (broker/admin_http.py) at ``/``
and ``/console/...``: overview, topics and partitions, a record browser, transactions
(with hanging ones and an abort action), producers per partition, consumer groups with
lag against the high watermark and the LSO, ACLs and SCRAM users, live charts.

Every page reads the broker's in-process state on its event loop when it is asked for,
bounded (pagination, read limits); nothing runs, and nothing is counted on the request
path, for the console while nobody looks at it. docs/console.md describes the pages.
"""

from __future__ import annotations

from importlib import resources
from typing import NoReturn

from aiohttp import web

from . import actions, groups, overview, records, security, topics, transactions
from .auth import ConsoleAuth
from .html import AUTH, BROKER, SECURITY_HEADERS, esc, layout
from .throttle import LoginThrottle

# Paths a browser may load before logging in.
PUBLIC_PREFIXES = ("/console/login", "/console/static/")
STATIC = {"console.css": "text/css", "console.js": "text/javascript"}


def is_console_path(path: str) -> bool:
    return path == "/" or path.startswith("/console/")


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    return web.Response(body=_asset(name), content_type=STATIC[name],
                        headers={**SECURITY_HEADERS, "Cache-Control": "max-age=300"})


async def login_page(request: web.Request) -> web.Response:
    auth: ConsoleAuth = request.app[AUTH]
    next_path = request.query.get("next", "/")
    failed = '<p class="error">Wrong token.</p>' if request.query.get("failed") else ""
    if auth.token is None:
        body = "<p>No admin token is configured: the console needs no login.</p>"
    else:
        body = (f"{failed}<form method=\"post\" action=\"/console/login\" class=\"login\">"
                f'<input type="hidden" name="next" value="{esc(next_path)}">'
                f'<label>Admin token <input type="password" name="token" id="token" '
                f'autocomplete="current-password"></label> <button id="login">Log in</button>'
                f"</form><p class=\"note\">The bearer token of admin.http.auth.token.file.</p>")
    return layout(request, "Log in", body)


async def login(request: web.Request) -> NoReturn:
    auth: ConsoleAuth = request.app[AUTH]
    form = await request.post()
    auth.login(str(form.get("token", "")), str(form.get("next", "/")), request.remote)


def add_routes(app: web.Application, broker, auth: ConsoleAuth) -> None:
    app[BROKER] = broker
    app[AUTH] = auth
    r = app.router
    r.add_get("/", overview.overview)
    r.add_get("/console/login", login_page)
    r.add_post("/console/login", login)
    r.add_get("/console/static/{name}", static)
    r.add_get("/console/api/rates", overview.rates)
    r.add_get("/console/topics", topics.topics)
    r.add_get("/console/topics/{topic}", topics.topic)
    r.add_get("/console/topics/{topic}/{partition}", topics.partition)
    r.add_get("/console/topics/{topic}/{partition}/records", records.records)
    r.add_get("/console/transactions", transactions.transactions)
    r.add_get("/console/transactions/{tid}", transactions.transaction)
    r.add_get("/console/transactions/{tid}/abort", actions.confirm_abort)
    r.add_post("/console/transactions/{tid}/abort", actions.abort)
    r.add_get("/console/hanging/abort", actions.confirm_abort_hanging)
    r.add_post("/console/hanging/abort", actions.abort_hanging)
    r.add_get("/console/groups", groups.groups)
    r.add_get("/console/groups/{group}", groups.group)
    r.add_get("/console/security", security.security)


__all__ = ["ConsoleAuth", "LoginThrottle", "add_routes", "is_console_path", "PUBLIC_PREFIXES", "layout"]
