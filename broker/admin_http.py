"""Admin/metrics HTTP endpoint (aiohttp), off unless ``admin.http.port`` is set.

GET /health   200 "ok" while the broker serves, 503 while it shuts down
GET /metrics  Prometheus text format: requests per API, connections, flush rounds,
              per-partition log start / high watermark / log end offsets and size
GET /topics   JSON: topics with partitions, offsets and config overrides
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .server import Broker

log = logging.getLogger(__name__)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def render_metrics(broker: Broker) -> str:
    lines = [
        "# HELP txbroker_requests_total Requests handled, by API.",
        "# TYPE txbroker_requests_total counter",
    ]
    for api, count in sorted(broker.request_counts.items()):
        lines.append(f'txbroker_requests_total{{api="{_label(api)}"}} {count}')
    flusher = broker.logs.flusher
    lines += [
        "# TYPE txbroker_connections gauge",
        f"txbroker_connections {broker.connection_count}",
        "# TYPE txbroker_flush_rounds_total counter",
        f"txbroker_flush_rounds_total {flusher.rounds}",
        "# TYPE txbroker_fsyncs_total counter",
        f"txbroker_fsyncs_total {flusher.fsyncs}",
    ]
    gauges = {
        "log_start_offset": lambda p: p.log_start_offset,
        "high_watermark": lambda p: p.high_watermark,
        "log_end_offset": lambda p: p.log_end_offset,
        "log_size_bytes": lambda p: p.size_bytes,
        "log_segments": lambda p: len(p.segments),
    }
    logs = sorted(broker.logs.logs.values(), key=lambda p: (p.topic, p.partition))
    for name, getter in gauges.items():
        lines.append(f"# TYPE txbroker_partition_{name} gauge")
        for p in logs:
            lines.append(f'txbroker_partition_{name}{{topic="{_label(p.topic)}",'
                         f'partition="{p.partition}"}} {getter(p)}')
    return "\n".join(lines) + "\n"


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
