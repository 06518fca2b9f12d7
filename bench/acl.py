"""What ACL checks cost: transactions/s with no authorizer vs Kafka's StandardAuthorizer
with a realistic ACL set.

    .venv/bin/python -m bench.acl [--runs N] [--seconds S] [--acls N] [--out DIR]

Each run starts two fresh brokers (``python -m txbroker serve``, durable defaults)
one after the other, taking turns so a change in the machine's load hits both:
``none`` (no ``authorizer.class.name``) and ``acls`` (StandardAuthorizer, ``super.users``
naming someone else, so every request goes through the ACLs). The ``acls`` broker
starts with ``--acls`` ACLs in its data directory (default 400): literal and prefixed
ACLs of other principals on topics, groups and transactional ids, DENY ACLs on
other names, plus what the benchmark's own principal (User:ANONYMOUS) needs: CREATE,
WRITE and DESCRIBE on topics prefixed ``bench-``, WRITE on transactional ids
prefixed ``bench-tx-``.

On each broker, 8 confluent-kafka transactional producers (one worker process each)
commit transactions of 10 records of 1 KiB to a 4-partition topic for ``--seconds``
(bench.transactions' rate scenario). cost = 1 - acls txn/s / none txn/s, median over
the runs. Results: bench/results/acl.json and acl.md. Target: cost <= 3%.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txbroker.broker.acl_store import write_acls
from txbroker.broker.authorizer import (
    STANDARD_AUTHORIZER,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from txbroker.broker.process import BrokerProcess

from . import clients, report
from .transactions import DEFAULT_OUT, cmd_txn_rate

PRODUCERS = 8
RECORDS = 10
VALUE_SIZE = 1024


def acl_set(n: int) -> list[AclBinding]:
    """``n`` ACLs like an installation with many applications, plus ours."""
    R, Op, P = ResourceType, AclOperation, PatternType
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    me = "User:ANONYMOUS"
    out = [AclBinding(R.TOPIC, "bench-", P.PREFIXED, me, "*", op, allow)
           for op in (Op.CREATE, Op.WRITE, Op.DESCRIBE)]
    out.append(AclBinding(R.TRANSACTIONAL_ID, "bench-tx-", P.PREFIXED, me, "*", Op.WRITE, allow))
    i = 0
    while len(out) < n:
        app = f"User:app{i}"
        out += [
            AclBinding(R.TOPIC, f"app{i}.events", P.LITERAL, app, "*", Op.WRITE, allow),
            AclBinding(R.TOPIC, f"app{i}.", P.PREFIXED, app, "*", Op.READ, allow),
            AclBinding(R.GROUP, f"app{i}-", P.PREFIXED, app, "*", Op.READ, allow),
            AclBinding(R.TRANSACTIONAL_ID, f"app{i}-tx", P.LITERAL, app, "*", Op.WRITE, allow),
            AclBinding(R.TOPIC, f"bench-private-{i}", P.LITERAL, me, "*", Op.WRITE, deny),
            AclBinding(R.TOPIC, f"b{i}", P.PREFIXED, "User:*", f"10.0.{i % 250}.1", Op.READ,
                       allow),
        ]
        i += 1
    return out[:n]


def _producer(args: tuple) -> dict[str, Any]:
    return cmd_txn_rate(*args)


def one_broker(mode: str, n_acls: int, seconds: float, pool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-acl-{mode}-") as data:
        overrides = {}
        if mode == "acls":
            os.makedirs(data, exist_ok=True)
            write_acls(data, acl_set(n_acls))
            overrides = {"authorizer.class.name": STANDARD_AUTHORIZER,
                         "super.users": "User:operator"}
        with BrokerProcess(data, overrides) as broker:
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            clients.create_topic(broker.bootstrap, topic)
            start_at = time.monotonic() + 8  # every worker warmed up by then
            jobs = [(broker.bootstrap, topic, f"bench-tx-{mode}-{i}", RECORDS, VALUE_SIZE,
                     start_at, seconds, 10**9, 5, 30.0, i % clients.PARTITIONS)
                    for i in range(PRODUCERS)]
            results = pool.map(_producer, jobs)
    txns = sum(r["txns"] for r in results)
    window = max(r["end"] for r in results) - min(r["started"] for r in results)
    return {"txns": txns, "window_s": round(window, 3), "txn_per_s": round(txns / window, 1)}


def render_markdown(rep: dict[str, Any]) -> str:
    s = rep["summary"]
    lines = [
        "# ACL cost: transactions/s without and with the authorizer", "",
        f"Command: `{rep['command']}`", "",
        f"{PRODUCERS} confluent-kafka transactional producers x {RECORDS} records of "
        f"{VALUE_SIZE} B per transaction; {rep['acls']} ACLs; {rep['runs']} runs, "
        f"{rep['seconds']} s each; medians.", "",
        "| broker | txn/s (median) | runs |", "|---|---|---|",
        f"| no authorizer | {s['none_txn_per_s']} | {', '.join(str(r['none']['txn_per_s']) for r in rep['per_run'])} |",
        f"| StandardAuthorizer, {rep['acls']} ACLs | {s['acls_txn_per_s']} | {', '.join(str(r['acls']['txn_per_s']) for r in rep['per_run'])} |",
        "",
        f"Cost (median of the per-run costs): **{s['cost_pct']}%** "
        f"(target <= 3%: {'met' if s['cost_pct'] <= 3 else 'NOT met'}).", "",
        f"Machine: {rep['machine']}", "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.acl", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0, help="measured window per broker")
    ap.add_argument("--acls", type=int, default=400, help="ACLs on the authorizer's broker")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    opts = ap.parse_args(argv)
    per_run = []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PRODUCERS) as pool:
        for run in range(opts.runs):
            # Alternate which goes first, so neither always meets a warmer machine.
            order = ("none", "acls") if run % 2 == 0 else ("acls", "none")
            result = {mode: one_broker(mode, opts.acls, opts.seconds, pool) for mode in order}
            result["cost_pct"] = round(
                100 * (1 - result["acls"]["txn_per_s"] / result["none"]["txn_per_s"]), 2)
            print(f"run {run + 1}: {result}", flush=True)
            per_run.append(result)
    summary = {
        "none_txn_per_s": statistics.median(r["none"]["txn_per_s"] for r in per_run),
        "acls_txn_per_s": statistics.median(r["acls"]["txn_per_s"] for r in per_run),
        "cost_pct": statistics.median(r["cost_pct"] for r in per_run),
    }
    rep = {"command": report.command_line("bench.acl", argv), "runs": opts.runs,
           "seconds": opts.seconds, "acls": opts.acls, "per_run": per_run,
           "summary": summary, "machine": report.machine_info()}
    report.write_report(opts.out, "acl", rep, render_markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
