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

Both brokers run at once, idle in turn: 8 worker processes, each with a
confluent-kafka transactional producer on each broker, commit transactions of 10
records of 1 KiB to a 4-partition topic, all on one broker for a ``--slice`` (0.5 s),
then all on the other, alternating for ``--seconds`` per broker. Taking turns in
short slices makes the machine's other load (2 shared cores) hit both alike; whole
runs one after the other differed by 2x on this machine. cost = 1 - acls txn/s /
none txn/s, median over the runs. Results: bench/results/acl.json and acl.md. Target: cost <= 3%.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txbroker.broker.security.acl_store import write_acls
from txbroker.broker.security.authorizer import STANDARD_AUTHORIZER
from txbroker.protocol.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from txbroker.testing import BrokerProcess

from . import clients, report
from .transactions import DEFAULT_OUT

PRODUCERS = 8
MODES = ("none", "acls")
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


def slices_worker(bootstraps: dict[str, str], topics: dict[str, str], index: int,
                  start_at: float, slice_s: float, slices: int) -> dict[str, int]:
    """One producer process: a transactional producer on each broker; in slice k
    (from ``start_at``) it commits transactions on broker ``MODES[k % 2]`` only. Every
    worker switches at the same moments, so the two brokers take turns under the same
    load and a change in the machine's other load hits both alike."""
    from confluent_kafka import Producer

    value = b"v" * VALUE_SIZE
    producers = {}
    for mode, bootstrap in bootstraps.items():
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 3,
                      "transactional.id": f"bench-tx-{mode}-{index}"})
        p.init_transactions(30)
        producers[mode] = p
    counts = {mode: 0 for mode in bootstraps}
    part = index % clients.PARTITIONS

    def one(mode: str) -> None:
        nonlocal part
        p = producers[mode]
        p.begin_transaction()
        for _ in range(RECORDS):
            p.produce(topics[mode], value, partition=part)
            part = (part + 1) % clients.PARTITIONS
        p.commit_transaction(30)

    for mode in bootstraps:  # warm-up
        for _ in range(5):
            one(mode)
    for k in range(slices):
        mode = MODES[k % 2]
        begin = start_at + k * slice_s
        late = time.monotonic() - begin
        if late < 0:
            time.sleep(-late)
        # Each slice's clock starts at its own beginning: a transaction that overran
        # the last slice is not counted against this one.
        deadline = begin + slice_s
        while time.monotonic() < deadline:
            one(mode)
            counts[mode] += 1
    for p in producers.values():
        p.flush(5)
    return counts


def _slices_worker(args: tuple) -> dict[str, int]:
    return slices_worker(*args)


def one_run(n_acls: int, seconds: float, slice_s: float, pool,
            control: bool = False) -> dict[str, Any]:
    """Both brokers up at once; producers alternate between them slice by slice."""
    with tempfile.TemporaryDirectory(prefix="bench-acl-none-") as d_none, \
            tempfile.TemporaryDirectory(prefix="bench-acl-acls-") as d_acls:
        write_acls(d_acls, acl_set(n_acls))
        secured = {} if control else {"authorizer.class.name": STANDARD_AUTHORIZER,
                                      "super.users": "User:operator"}
        with BrokerProcess(d_none) as b_none, BrokerProcess(d_acls, secured) as b_acls:
            bootstraps = {"none": b_none.bootstrap, "acls": b_acls.bootstrap}
            topics = {}
            for mode, bootstrap in bootstraps.items():
                topics[mode] = f"bench-{mode}-{uuid.uuid4().hex[:6]}"
                clients.create_topic(bootstrap, topics[mode])
            slices = max(2, 2 * round(seconds / slice_s))
            start_at = time.monotonic() + 10  # every worker warmed up by then
            results = pool.map(_slices_worker, [
                (bootstraps, topics, i, start_at, slice_s, slices) for i in range(PRODUCERS)])
    window = slice_s * slices / 2
    out: dict[str, Any] = {}
    for mode in MODES:
        txns = sum(r[mode] for r in results)
        out[mode] = {"txns": txns, "window_s": window, "txn_per_s": round(txns / window, 1)}
    return out


def render_markdown(rep: dict[str, Any]) -> str:
    s = rep["summary"]
    lines = [
        "# ACL cost: transactions/s without and with the authorizer"
        + (" (A/A CONTROL: no authorizer on either broker)" if rep.get("control") else ""), "",
        f"Command: `{rep['command']}`", "",
        f"Brokers taking turns in {rep['slice']} s slices; "
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
    ap.add_argument("--seconds", type=float, default=8.0, help="measured time per broker")
    ap.add_argument("--slice", type=float, default=0.5,
                    help="seconds one broker has the producers before the other takes over")
    ap.add_argument("--acls", type=int, default=400, help="ACLs on the authorizer's broker")
    ap.add_argument("--control", action="store_true",
                    help="A/A control: the second broker has no authorizer either (the "
                         "method's own bias and noise); report acl-control.*")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    opts = ap.parse_args(argv)
    per_run = []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PRODUCERS) as pool:
        for run in range(opts.runs):
            result = one_run(opts.acls, opts.seconds, opts.slice, pool, opts.control)
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
           "seconds": opts.seconds, "slice": opts.slice, "control": opts.control, "acls": opts.acls, "per_run": per_run,
           "summary": summary, "machine": report.machine_info()}
    report.write_report(opts.out, "acl-control" if opts.control else "acl", rep,
                        render_markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
