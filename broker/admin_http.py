"""Admin/metrics HTTP endpoint (aiohttp), off unless ``admin.http.port`` is set.

GET /health   200 "ok" while the broker serves, 503 while it shuts down
GET /metrics  Prometheus text format (broker/metrics.py; docs/operations.md lists them):
              requests, errors, bytes and latency per API; transactions by outcome;
              per-partition offsets (HW, LSO); consumer-group lag; fsync latency
GET /topics   JSON: topics with partitions, offsets and config overrides
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from .metrics import render

if TYPE_CHECKING:
    from .server import Broker

log = logging.getLogger(__name__)


def render_metrics(broker: Broker) -> str:
    """The /metrics page (broker/metrics.py)."""
    return render(broker)


def build_app(broker: Broker) -> web.Application:
    async def health(_request: web.Request) -> web.Response:
        if broker.stopping.is_set():
            return web.Response(status=503, text="stopping\n")
        return web.Response(text="ok\n")

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

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/topics", topics)
    return app


class AdminHttpServer:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(build_app(self.broker), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server  # the bound port when 0 was asked for
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        log.info("admin HTTP on http://%s:%d (/health, /metrics, /topics)", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
