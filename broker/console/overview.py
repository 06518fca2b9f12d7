"""The overview page: what this broker is, how it is reached, how busy it has been."""

from __future__ import annotations

import shutil
import time
from importlib import metadata

from aiohttp import web
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import api_name

from ..metrics import FLUSH_BUCKETS, REQUEST_BUCKETS
from .html import AUTH, BROKER, Raw, duration, kv, layout, link, size, table

# The APIs with the most errors listed (of up to ~70 APIs): a bounded table.
TOP_ERRORS = 15


def _version() -> str:
    # As txbroker.__version__ (the entry point's package, which a layer must not import).
    try:
        return metadata.version("txbroker")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def request_totals(broker) -> tuple[int, int, int, int]:
    """(requests, error responses, bytes in, bytes out) since start."""
    requests = bytes_in = bytes_out = 0
    for stats in list(broker.metrics.requests.values()):
        requests += stats.count
        bytes_in += stats.bytes_in
        bytes_out += stats.bytes_out
    errors = sum(list(broker.metrics.errors.values()))
    return requests, errors, bytes_in, bytes_out


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


async def overview(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    auth = request.app[AUTH]
    config = broker.config
    uptime_s = time.time() - broker.started_at if broker.started_at else 0.0
    requests, errors, bytes_in, bytes_out = request_totals(broker)
    logs = list(broker.logs.logs.values())
    used = sum(p.size_bytes for p in logs)
    try:
        disk = shutil.disk_usage(broker.logs.data_dir)
        disk_text = f"{size(disk.free)} free of {size(disk.total)}"
    except OSError as e:
        disk_text = f"unknown ({e.strerror})"
    state = broker.transactions
    open_txns = len(state.open_transaction_starts()) if state.loaded else 0
    per_s = (lambda n: f"{n / uptime_s:.1f}/s") if uptime_s > 0 else (lambda n: "-")
    summary = kv([
        ("Version", f"txbroker {_version()}"),
        ("Cluster id", broker.cluster_id),
        ("Uptime", duration(uptime_s * 1000)),
        ("Data directory", broker.logs.data_dir),
        ("Log data", f"{size(used)} in {len(logs)} partitions ({disk_text})"),
        ("Topics", len(broker.logs.topics)),
        ("Connections", broker.connection_count),
        ("Requests", f"{requests} ({per_s(requests)} since start)"),
        ("Error responses", f"{errors} ({per_s(errors)} since start)"),
        ("Bytes in / out", f"{size(bytes_in)} / {size(bytes_out)}"),
        ("Open transactions", link("/console/transactions?state=open", open_txns)),
        ("Authorizer", "on (ACLs checked)" if broker.authorizer is not None else "off"),
        ("Console actions", "enabled (admin token)" if auth.can_act
         else f"read-only: {auth.why_read_only()}"),
    ], id="summary")
    listeners = table(
        ["Listener", "Bound", "Advertised", "Security protocol", "SASL mechanisms"],
        [[lst.name, f"{lst.host}:{lst.port}", "{}:{}".format(*broker.advertised_for(lst.name)),
          lst.spec.security_protocol,
          ", ".join(sorted(getattr(lst.sasl, "mechanisms", ()) or ())) or "-"]
         for lst in broker.listeners], id="listeners")
    features = table(["Feature", "Finalized level"],
                     sorted(broker.features.levels.items()), id="features")
    server = broker.admin_http
    admin = kv([
        ("Scheme", server.scheme),
        ("Bound", f"{server.host}:{server.port}"),
        ("Bearer token", "required" if config.get("admin.http.auth.token.file") else "none"),
    ])
    error_rows = []
    for (api_key, code), n in sorted(broker.metrics.errors.items(), key=lambda kv: -kv[1]):
        if code and len(error_rows) < TOP_ERRORS:
            error_rows.append([api_name(api_key), _error_name(code), n])
    charts = Raw('<div id="charts" data-source="/console/api/rates"></div>')
    body = (f"{summary}<h2>Live</h2>{charts}<h2>Listeners</h2>{listeners}"
            f"<h2>Features</h2>{features}<h2>Admin endpoint</h2>{admin}"
            f"<h2>Errors by API and code</h2>"
            f"{table(['API', 'Error', 'Responses'], error_rows, id='errors')}")
    return layout(request, "Overview", body)


# The APIs whose bytes the charts show, and the one whose latency is the commit's.
PRODUCE_KEY, FETCH_KEY, END_TXN_KEY = 0, 1, 26


def _merged_buckets(histograms) -> list[int]:
    counts: list[int] = []
    for h in histograms:
        if not counts:
            counts = [0] * len(h.counts)
        for i, n in enumerate(h.counts):
            counts[i] += n
    return counts


async def rates(request: web.Request) -> web.Response:
    """Cumulative counters for the overview's charts: the page's script polls this and
    draws rates and percentiles from the differences (nothing is sampled while nobody
    polls)."""
    broker = request.app[BROKER]
    stats = list(broker.metrics.requests.items())
    produce_in = sum(s.bytes_in for (k, _v), s in stats if k == PRODUCE_KEY)
    fetch_out = sum(s.bytes_out for (k, _v), s in stats if k == FETCH_KEY)
    end_txn = _merged_buckets(s.time for (k, _v), s in stats if k == END_TXN_KEY)
    outcomes = dict(broker.transactions.outcomes)
    return web.json_response({
        "time": time.time(),
        "produce_bytes": produce_in,
        "fetch_bytes": fetch_out,
        "committed": outcomes.get("committed", 0),
        "aborted": sum(n for k, n in outcomes.items() if k != "committed"),
        "end_txn": {"bounds": list(REQUEST_BUCKETS), "counts": end_txn},
        "fsync": {"bounds": list(FLUSH_BUCKETS), "counts": list(broker.metrics.flush_time.counts)},
    }, headers={"Cache-Control": "no-store"})
