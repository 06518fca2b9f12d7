"""Admin/metrics HTTP endpoint (aiohttp), off unless ``admin.http.port`` is set.

GET /health   200 "ok" while the broker serves, 200 "degraded" with one line per problem
              while the data directory is full, read-only or failing or a partition is
              offline (JSON with ?format=json or Accept: application/json), 503 while it
              shuts down
GET /metrics  Prometheus text format (broker/metrics.py; docs/operations.md lists them):
              requests, errors, bytes and latency per API; transactions by outcome;
              per-partition offsets (HW, LSO); consumer-group lag; fsync latency
GET /topics   JSON: topics with partitions, offsets and config overrides
GET /         the web console (broker/console/, docs/console.md) unless
              admin.http.console.enable is false
POST /faults  install faults (a JSON object or a list; docs/fault-injection.md); GET
              /faults lists them with their counts, GET/DELETE /faults/{id} reads or
              removes one, DELETE /faults removes all. On a non-loopback address they
              need the bearer token: faults are a test tool, not for strangers

Loopback only unless ``admin.http.host`` says otherwise. It can serve HTTPS
(``admin.http.ssl.*``, optionally asking for client certificates) and require a bearer
token read from ``admin.http.auth.token.file`` on every path but /health (a liveness
probe learns nothing from it). A bearer token is what Prometheus' ``authorization``
scrape setting and every HTTP client send without extra machinery, and it keeps this
endpoint independent of the Kafka listeners' SASL users (docs/security.md).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import os
import ssl
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from aiohttp import web

from . import console
from .config import StartupError
from .metrics import MetricsSource, render
from .storage_status import describe, storage_status

if TYPE_CHECKING:
    import asyncio

    from .config import BrokerConfig
    from .request_faults import FaultTable

log = logging.getLogger(__name__)


class AdminSource(MetricsSource, Protocol):
    """What the endpoint reads of the running broker (broker/server.py's Broker), which
    imports this module: a Protocol, not an import of Broker."""

    config: BrokerConfig
    stopping: asyncio.Event
    faults: FaultTable


def render_metrics(broker: MetricsSource) -> str:
    """The /metrics page (broker/metrics.py)."""
    return render(broker)


class BearerToken:
    """The token in ``path``, re-read when the file changes (rotation without restart)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = b""
        self.load()
        mode = os.stat(path).st_mode
        if mode & 0o077:
            log.warning("admin.http.auth.token.file %s is readable by other users (mode %o): "
                        "chmod 600 it", path, mode & 0o777)

    def load(self) -> bytes:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                with open(self.path, "rb") as f:
                    token = f.read().strip()
                if not token:
                    raise StartupError(f"admin.http.auth.token.file {self.path} is empty")
                self._token, self._stamp = token, stamp
        except OSError as e:
            if not self._token:
                raise StartupError(f"cannot read admin.http.auth.token.file {self.path}: "
                                   f"{e.strerror}") from None
            # Kept the last token: a file being replaced must not lock operators out.
        return self._token

    def accepts(self, header: str | None) -> bool:
        scheme, _, credentials = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self.load())


def server_ssl_context(config) -> ssl.SSLContext | None:
    """HTTPS settings from admin.http.ssl.*; None when no keystore is given."""
    keystore = config.get("admin.http.ssl.keystore.location")
    if not keystore:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(keystore, password=config.get("admin.http.ssl.key.password") or None)
    except (OSError, ssl.SSLError) as e:
        raise StartupError(f"admin.http.ssl.keystore.location {keystore}: cannot load the key "
                           f"and certificate chain ({getattr(e, 'reason', None) or e})") from None
    client_auth = config.get("admin.http.ssl.client.auth")
    if client_auth != "none":
        truststore = config.get("admin.http.ssl.truststore.location")
        if not truststore:
            raise StartupError(f"admin.http.ssl.client.auth={client_auth} needs "
                               "admin.http.ssl.truststore.location")
        try:
            ctx.load_verify_locations(truststore)
        except (OSError, ssl.SSLError) as e:
            raise StartupError(f"admin.http.ssl.truststore.location {truststore}: {e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def build_app(broker: AdminSource, token: BearerToken | None = None,
              console_auth: console.ConsoleAuth | None = None,
              host: str = "127.0.0.1") -> web.Application:
    """The endpoint's routes; the console's too when ``console_auth`` is given."""
    async def health(request: web.Request) -> web.Response:
        if broker.stopping.is_set():
            return web.Response(status=503, text="stopping\n")
        # Degraded (a full, read-only or failing data directory, offline partitions) is
        # still 200: the broker serves what it can, and a restart by a liveness probe
        # would not give the disk room (it would lose the condition's state instead).
        status = storage_status(broker.logs)
        if token is not None and not token.accepts(request.headers.get("Authorization")):
            # /health needs no token: without one it says which conditions, not where.
            status = {"status": status["status"],
                      "conditions": [{"condition": c["condition"]} for c in status["conditions"]],
                      "offline_partitions": status["offline_partitions"]}
        if "json" in request.query.get("format", "") \
                or "application/json" in request.headers.get("Accept", ""):
            return web.json_response(status)
        if status["status"] == "ok":
            return web.Response(text="ok\n")
        return web.Response(text="degraded\n" + "".join(f"{line}\n"
                                                          for line in describe(status)))

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=render_metrics(broker),
                            content_type="text/plain", charset="utf-8")

    async def topics(_request: web.Request) -> web.Response:
        out = {}
        for name, info in sorted(broker.logs.topics.items()):
            parts = []
            for p in range(info.partitions):
                plog = broker.logs.get_log(name, p)
                if plog is None:
                    continue
                parts.append({"partition": p, "log_start_offset": plog.log_start_offset,
                              "high_watermark": plog.high_watermark,
                              "log_end_offset": plog.log_end_offset,
                              "size_bytes": plog.size_bytes, "segments": len(plog.segments)})
            out[name] = {"topic_id": str(info.topic_id), "internal": info.internal,
                         "configs": info.configs, "partitions": parts}
        return web.json_response(out)

    throttle = console_auth.throttle if console_auth is not None else console.LoginThrottle()

    def refused_token(request: web.Request) -> web.Response | None:
        """A wrong bearer token makes its address wait, as a failed console login does;
        a try before the wait is over gets 429 without its token looked at."""
        header = request.headers.get("Authorization")
        wait = throttle.wait(request.remote)
        if wait > 0:
            broker.metrics.count_login_failure("throttled")
            seconds = math.ceil(wait)
            return web.Response(status=429, text=f"too many failed logins: try again in "
                                                 f"{seconds} s\n",
                                headers={"Retry-After": str(seconds)})
        if token is not None and token.accepts(header):
            throttle.succeeded(request.remote)
            return None
        if console_auth is not None and console.is_console_path(request.path) \
                and console_auth.has_session(request):
            return None  # (a browser's session cookie beside some other header)
        broker.metrics.count_login_failure("wrong_token")
        throttle.failed(request.remote)
        return web.Response(status=401, text="bearer token required\n",
                            headers={"WWW-Authenticate": 'Bearer realm="txbroker"'})

    @web.middleware
    async def require_token(request: web.Request, handler):
        if token is not None and request.path != "/health" \
                and request.headers.get("Authorization") is not None:
            if (refusal := refused_token(request)) is not None:
                log.info("admin HTTP: refused %s %s from %s (%s)", request.method,
                         request.path, request.remote,
                         "wrong bearer token" if refusal.status == 401 else "throttled")
                return refusal
            return await handler(request)
        if token is not None and request.path != "/health" \
                and not token.accepts(request.headers.get("Authorization")):
            if console_auth is not None and console.is_console_path(request.path):
                # A browser sends the token as the login's session cookie.
                if request.path.startswith(console.PUBLIC_PREFIXES) \
                        or console_auth.has_session(request):
                    return await handler(request)
                if request.method == "GET":
                    raise web.HTTPSeeOther("/console/login?next=" + quote(
                        request.path_qs, safe=""))
            log.info("admin HTTP: refused %s %s from %s (no valid bearer token)",
                     request.method, request.path, request.remote)
            return web.Response(status=401, text="bearer token required\n",
                                headers={"WWW-Authenticate": 'Bearer realm="txbroker"'})
        return await handler(request)

    app = web.Application(middlewares=[require_token])
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/topics", topics)
    if console_auth is not None:
        console.add_routes(app, broker, console_auth)
    add_fault_routes(app, broker, token is not None or _is_loopback(host))
    return app


def add_fault_routes(app: web.Application, broker: AdminSource, allowed: bool) -> None:
    """/faults: install, list and remove faults (broker/request_faults.py). ``allowed``:
    the endpoint has a token or listens on loopback only."""

    def refused(request: web.Request) -> web.Response | None:
        # Without a token only a loopback endpoint changes faults: anyone who can reach
        # it runs on this machine already.
        if allowed:
            return None
        log.warning("admin HTTP: refused %s %s from %s: faults on a non-loopback endpoint "
                    "need admin.http.auth.token.file", request.method, request.path,
                    request.remote)
        return web.Response(status=403, text="faults on a non-loopback admin endpoint need "
                                             "admin.http.auth.token.file\n")

    async def add(request: web.Request) -> web.Response:
        if (denied := refused(request)) is not None:
            return denied
        try:
            specs = await request.json()
        except ValueError as e:
            return web.Response(status=400, text=f"the body is not JSON: {e}\n")
        try:
            faults = broker.faults.add_json(specs)
        except ValueError as e:
            log.info("admin HTTP: fault refused: %s", e)
            return web.Response(status=400, text=f"{e}\n")
        return web.json_response([f.describe() for f in faults], status=201)

    async def listing(request: web.Request) -> web.Response:
        if (denied := refused(request)) is not None:
            return denied
        return web.json_response([f.describe() for f in broker.faults.list()])

    async def one(request: web.Request) -> web.Response:
        if (denied := refused(request)) is not None:
            return denied
        fault_id = request.match_info["fault_id"]
        fault = (broker.faults.remove(fault_id) if request.method == "DELETE"
                 else broker.faults.get(fault_id))
        if fault is None:
            return web.Response(status=404, text=f"no fault {fault_id}\n")
        return web.json_response(fault.describe())

    async def clear(request: web.Request) -> web.Response:
        if (denied := refused(request)) is not None:
            return denied
        removed = len(broker.faults.active())
        broker.faults.clear()
        return web.json_response({"removed": removed})

    app.router.add_post("/faults", add)
    app.router.add_get("/faults", listing)
    app.router.add_delete("/faults", clear)
    app.router.add_get("/faults/{fault_id}", one)
    app.router.add_delete("/faults/{fault_id}", one)


class AdminHttpServer:
    def __init__(self, broker: AdminSource, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        config = broker.config
        self.ssl_context = server_ssl_context(config)
        path = config.get("admin.http.auth.token.file")
        self.token = BearerToken(path) if path else None
        self.console_auth = console.ConsoleAuth(
            self.token, read_only=config.get("admin.http.console.read.only"),
            principal=config.get("admin.http.console.principal"),
            secure=self.ssl_context is not None,
            on_failure=broker.metrics.count_login_failure) \
            if config.get("admin.http.console.enable") else None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    async def start(self) -> None:
        app = build_app(self.broker, self.token, self.console_auth, self.host)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        server = site._server  # the bound port when 0 was asked for
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        log.info("admin HTTP on %s://%s:%d (/health, /metrics, /topics, /faults%s)%s",
                 self.scheme, self.host, self.port,
                 ", console at /" if self.console_auth else "",
                 ", bearer token required" if self.token else "")
        if self.token is None and not _is_loopback(self.host):
            log.warning("admin HTTP on %s without admin.http.auth.token.file: anyone who "
                        "reaches it can read topics and metrics", self.host)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
