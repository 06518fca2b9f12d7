"""The report of the transaction benchmark (``python -m bench.transactions``): the
runs of each broker summarized (medians), the ratios of each txbroker variant to
Tansu, the targets checked, and the Markdown of bench/results/transactions.md.

Why a module of its own: it works on the results alone (plain dicts, no broker, no
clients, no processes), apart from the code that measures them.
"""

from __future__ import annotations

import statistics
from typing import Any

from .brokers import KAFKA_FLUSH_BROKER, KAFKA_FLUSH_POLICY
from .report import fmt as _fmt
from .throughput import _ratio
from .transactions_settings import FILL_PRODUCERS, PARTITIONS, TARGETS

# --- aggregation ------------------------------------------------------------------------

def _median(values: list[float | None], digits: int = 2) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), digits) if vals else None


RATE_KEYS = ("txn_per_s", "mb_per_s", "commit_p50_ms", "commit_p99_ms", "broker_cpu_cores",
             "clients_cpu_s", "other_load_cores")
CONSUME_KEYS = tuple(f"{k}_{m}" for k in ("rc", "ru") for m in (
    "mb_per_s", "records_per_s", "seconds", "first_record_s", "records", "aborted_seen")) + (
    "rc_over_ru", "broker_cpu_cores", "other_load_cores")
COST_KEYS = ("idempotent_mb_per_s", "transactional_mb_per_s", "cost", "cost_pair_median",
             "commits", "commit_p50_ms", "commit_p99_ms", "broker_cpu_cores",
             "other_load_cores")
FOUR_DIGIT_KEYS = ("cost", "cost_pair_median", "rc_over_ru")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    names: list[str] = []
    for r in runs:
        names += [n for n in r.get("phases", {}) if n not in names]
    phases: dict[str, Any] = {}
    for name in names:
        data = [r["phases"][name] for r in runs if name in r.get("phases", {})]
        ok = [d for d in data if d.get("ok")]
        keys = RATE_KEYS if name.startswith("rate") else CONSUME_KEYS \
            if name.startswith("consume") else COST_KEYS if name.startswith("cost") \
            else ("mb_per_s", "seconds", "committed", "aborted")
        phases[name] = {"runs": len(data), "ok_runs": len(ok),
                        "errors": [d["error"] for d in data if not d.get("ok")]}
        phases[name] |= {k: _median([d.get(k) for d in ok], 4 if k in FOUR_DIGIT_KEYS else 2)
                         for k in keys}
        incorrect = [d["incorrect"] for d in ok if d.get("incorrect")]
        if incorrect:
            phases[name]["incorrect"] = incorrect
    rss = [r["peak_rss_bytes"] for r in runs if r.get("peak_rss_bytes")]
    costs = [r["cost"] for r in runs if r.get("cost") is not None]
    return {
        "runs": len(runs), "ok_runs": sum(1 for r in runs if r.get("ok")),
        "errors": [r["error"] for r in runs if r.get("error")],
        "phases": phases,
        "cost": _median(costs, 4),
        "cost_runs": [round(c, 4) for c in costs],
        "peak_rss_mb_median": _median([x / 1e6 for x in rss], 1),
        "peak_rss_mb_max": round(max(rss) / 1e6, 1) if rss else None,
    }


def _txbrokers(results: dict[str, Any]) -> list[str]:
    return [name for name in results if name.startswith("txbroker")]


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per txbroker variant: variant / Tansu (throughput > 1: txbroker faster; latency,
    cost, RSS > 1: bigger)."""
    return {name: r for name in _txbrokers(results) if (r := _ratios(results, name))}


def _ratios(results: dict[str, dict[str, Any]], txbroker: str) -> dict[str, Any]:
    tx = results.get(txbroker, {}).get("summary")
    ta = results.get("tansu", {}).get("summary")
    if not tx or not ta:
        return {}
    out: dict[str, Any] = {}
    for name, a in tx["phases"].items():
        b = ta["phases"].get(name)
        if not b:
            continue
        if name.startswith("rate"):
            out[name] = {"txn_per_s": _ratio(a["txn_per_s"], b["txn_per_s"]),
                         "commit_p99_ms": _ratio(a["commit_p99_ms"], b["commit_p99_ms"])}
        elif name == "consume":
            for k, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
                out[f"consume-{level}"] = {"mb_per_s": _ratio(a[f"{k}_mb_per_s"],
                                                              b[f"{k}_mb_per_s"])}
            if b.get("incorrect"):
                out["consume-read_committed"]["note"] = \
                    "Tansu's result is incorrect (aborted records delivered)"
        elif name == "cost":
            for mode in ("idempotent", "transactional"):
                key = f"{mode}_mb_per_s"
                out[f"cost-{mode}"] = {"mb_per_s": _ratio(a[key], b[key])}
    out["peak_rss_mb"] = _ratio(tx["peak_rss_mb_median"], ta["peak_rss_mb_median"])
    return out


def check_targets(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per txbroker variant: each of the first targets, measured and met."""
    out: dict[str, Any] = {}
    for name in _txbrokers(results):
        s = results[name].get("summary")
        if not s:
            continue
        out[name] = {}
        for key, (phase, metric, op, target) in TARGETS.items():
            got = s["cost"] if phase == "cost" else s["phases"].get(phase, {}).get(metric)
            met = None if got is None else got >= target if op == ">=" else got <= target
            out[name][key] = {"target": f"{op} {target:g}", "measured": got, "met": met}
    return out


# --- report -----------------------------------------------------------------------------

def _yes(met: bool | None) -> str:
    return "n/a" if met is None else "yes" if met else "**no**"


def render_markdown(report: dict[str, Any]) -> str:
    m, o = report["machine"], report["options"]
    lines = [
        "# Transactions benchmark",
        "",
        f"- date: {m['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} logical cores, "
        f"{m['memory_gb']} GB RAM, {m['os']}; load average at start {m['loadavg_start']}",
        f"- python {m['python']}; txbroker {m['txbroker_commit']}; "
        f"confluent-kafka {m['confluent_kafka']}; {m['tansu']} ({m['tansu_package']})",
        f"- {o['runs']} runs (median shown), a fresh broker per run; "
        f"{o['value_size']}-byte values, {PARTITIONS}-partition topics; "
        f"every producer in its own worker process; wall time {report['wall_seconds']:.0f} s",
        "- txbroker: defaults (durable: fsync before acks=all and before acting on "
        "transaction state), fresh temporary data dir"
        + (f", overrides {o['txbroker_overrides']}" if o["txbroker_overrides"] else "")
        + f"; {KAFKA_FLUSH_BROKER}: the same with Apache Kafka's default flush policy "
        f"({', '.join(f'`{k}={v}`' for k, v in KAFKA_FLUSH_POLICY.items())}: no fsync "
        "waits, as in Kafka)"
        + "; Tansu: `--storage-engine memory://tansu/` (in memory, no fsync)",
        "",
        f"## Transactions/s ({o['rate_seconds']:g} s window per run, "
        f"{o['warmup_txns']} warm-up transactions per producer)",
        "",
        "Commit latency = the time of one `commit_transaction()` call "
        "(flush of the transaction's records + EndTxn), over all producers.",
        "",
        "| broker | producers | records/txn | txn/s | MB/s | commit p50 ms | commit p99 ms "
        "| broker CPU | other load | ok runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    noisy = False
    results = report["results"]
    for broker, data in results.items():
        for name, s in data["summary"]["phases"].items():
            if not name.startswith("rate"):
                continue
            p, r = name.split("-")[1:]
            lines.append(
                f"| {broker} | {p[:-1]} | {r[:-1]} | {_fmt(s['txn_per_s'], 0)} "
                f"| {_fmt(s['mb_per_s'], 2)} | {_fmt(s['commit_p50_ms'], 2)} "
                f"| {_fmt(s['commit_p99_ms'], 2)} | {_fmt(s['broker_cpu_cores'], 2)} "
                f"| {_fmt(s['other_load_cores'], 2)} | {s['ok_runs']}/{s['runs']} |")
            noisy = noisy or (s["other_load_cores"] or 0) > 0.2
    lines += [
        "",
        f"## read_committed vs read_uncommitted ({FILL_PRODUCERS} producers x "
        f"{o['fill_txns']} transactions x {o['fill_records']:,} records, every "
        f"{o['abort_every']}th transaction aborted; {o['reads_per_level']} reads per level "
        "per run, taking turns)",
        "",
        "| broker | isolation | records read | aborted records read | MB/s | s per read "
        "| first record s | ok runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for broker, data in results.items():
        s = data["summary"]["phases"].get("consume")
        if s is None:
            continue
        for k, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
            lines.append(
                f"| {broker} | {level} | {_fmt(s[f'{k}_records'], 0)} "
                f"| {_fmt(s[f'{k}_aborted_seen'], 0)} | {_fmt(s[f'{k}_mb_per_s'])} "
                f"| {_fmt(s[f'{k}_seconds'], 3)} | {_fmt(s[f'{k}_first_record_s'], 3)} "
                f"| {s['ok_runs']}/{s['runs']} |")
        lines.append(f"| {broker} | read_committed / read_uncommitted MB/s (median of runs) "
                     f"| | | {_fmt(s['rc_over_ru'], 3)} | | | |")
        noisy = noisy or (s["other_load_cores"] or 0) > 0.2
    lines += ["", "Filling the topic (transactional produce, 4 producers, 1,000-record "
              "transactions):", "", "| broker | MB/s | s | ok runs |", "|---|---:|---:|---:|"]
    for broker, data in results.items():
        fill = data["summary"]["phases"].get("fill")
        if fill is not None:
            lines.append(f"| {broker} | {_fmt(fill['mb_per_s'])} | {_fmt(fill['seconds'], 2)} "
                         f"| {fill['ok_runs']}/{fill['runs']} |")
    lines += [
        "",
        f"## Cost of transactions ({o['cost_slices']} slices of "
        f"{o['cost_seconds_per_mode'] / o['cost_slices']:g} s per mode, taking turns; "
        "producing as fast as possible, commit when the transaction is "
        f"{o['commit_interval_s'] * 1000:g} ms old)",
        "",
        "| broker | idempotent MB/s | transactional MB/s | cost | per-run costs "
        "| cost, median of slice pairs | commits per run | commit p50 / p99 ms | broker CPU "
        "| ok runs |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for broker, data in results.items():
        s = data["summary"]
        c = s["phases"].get("cost", {})
        cost = "n/a" if s["cost"] is None else f"{100 * s['cost']:.1f}%"
        pairs = c.get("cost_pair_median")
        pairs = "n/a" if pairs is None else f"{100 * pairs:.1f}%"
        lines.append(
            f"| {broker} | {_fmt(c.get('idempotent_mb_per_s'))} "
            f"| {_fmt(c.get('transactional_mb_per_s'))} | {cost} "
            f"| {', '.join(f'{100 * x:.1f}%' for x in s['cost_runs'])} | {pairs} "
            f"| {_fmt(c.get('commits'), 0)} "
            f"| {_fmt(c.get('commit_p50_ms'), 1)} / {_fmt(c.get('commit_p99_ms'), 1)} "
            f"| {_fmt(c.get('broker_cpu_cores'), 2)} "
            f"| {c.get('ok_runs', 0)}/{c.get('runs', 0)} |")
        noisy = noisy or (c.get("other_load_cores") or 0) > 0.2
    lines += ["", "## Peak RSS (broker + children, MB)", "",
              "| broker | median of runs | max |", "|---|---:|---:|"]
    for broker, data in results.items():
        s = data["summary"]
        lines.append(f"| {broker} | {_fmt(s['peak_rss_mb_median'])} "
                     f"| {_fmt(s['peak_rss_mb_max'])} |")
    for variant, variant_ratios in report["ratios"].items():
        lines += ["", f"## {variant} / Tansu", "",
                  "| scenario | txn/s or MB/s | commit p99 | note |", "|---|---:|---:|---|"]
        for name, r in variant_ratios.items():
            if name == "peak_rss_mb":
                continue
            lines.append(f"| {name} | {_fmt(r.get('txn_per_s', r.get('mb_per_s')), 2)} "
                         f"| {_fmt(r.get('commit_p99_ms'), 2)} | {r.get('note', '')} |")
        lines.append(f"| peak RSS | {_fmt(variant_ratios['peak_rss_mb'], 2)} | | |")
    if report["targets"]:
        variants = list(report["targets"])
        lines += ["", "## First targets", "",
                  "| target | bound | " + " | ".join(f"{v} | met" for v in variants) + " |",
                  "|---|---:|" + "---:|---|" * len(variants)]
        for key in TARGETS:
            t0 = report["targets"][variants[0]][key]
            cells = " | ".join(f"{_fmt(report['targets'][v][key]['measured'], 3)} "
                               f"| {_yes(report['targets'][v][key]['met'])}" for v in variants)
            lines.append(f"| {key} | {t0['target']} | {cells} |")
    if noisy:
        lines += ["", "**Warning:** other processes used more than 0.2 cores during some "
                  "phases (\"other load\"); the numbers are not reliable. Re-run on an idle "
                  "machine (`--wait-idle 60`)."]
    commits = sorted({r.get("txbroker_commit", "") for name in _txbrokers(results)
                      for r in results[name].get("runs", [])} - {""})
    if len(commits) > 1:
        lines += ["", f"**Warning:** the broker code changed during the benchmark "
                  f"({', '.join(commits)}); the txbroker runs did not all test the same code."]
    failures = []
    for broker, data in results.items():
        s = data["summary"]
        failures += [(broker, "run", e) for e in s["errors"]]
        for name, ph in s["phases"].items():
            failures += [(broker, name, e) for e in sorted(set(ph["errors"]))]
            failures += [(broker, name, e) for e in sorted(set(ph.get("incorrect", [])))]
    failures += [(b, "-", e) for b, e in report.get("skipped", {}).items()]
    if failures:
        lines += ["", "## Failures and incorrect results", ""]
        lines += [f"- {b} / {n}: {e}" for b, n, e in failures]
    lines.append("")
    return "\n".join(lines)
