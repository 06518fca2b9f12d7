"""This checkout's broker against the broker of an earlier commit, side by side.

    make bench-compare BASE=<ref>
    .venv/bin/python -m bench.compare --base REF [--rounds 3] [--messages 300000]
        [--txn-seconds 5] [--only produce,consume,txn,fixture] [--threshold 0.9] [--out DIR]

REF is checked out into a temporary git worktree (removed afterwards, also after Ctrl-C
or an error). Both brokers run at the same time as real processes,
``python -m txbroker serve --host 127.0.0.1 --port P --data-dir D`` (``-m broker`` for
a tree without txbroker/__main__.py), each with PYTHONPATH and cwd set to its own tree,
the same Python (this one), their defaults and fresh data directories. Once both accept
connections, the benchmark waits 3 s for their background start-up work, then runs
the loads round after round, alternating which broker goes first (ABBA):

  produce    confluent-kafka, 1 KiB values, acks=all, 4 partitions, linger 5 ms (MB/s)
  consume    read_committed confluent-kafka consumer, no auto-commit, all 4 partitions
             assigned, every record read from the beginning of a topic filled before
             the rounds by a transactional producer (committed, 1,000 records per
             transaction) (MB/s)
  txn        8 transactional producers (processes), 10 x 1 KiB records per transaction,
             all starting together, for --txn-seconds (transactions/s)
  fixture    what a pytest session pays at its first ``txbroker`` fixture: a fresh
             pytest session per tree (PYTHONPATH=tree, installed plugins autoloaded)
             times the fixture's set-up: the plugin's imports (txbroker.testing)
             and the BrokerThread's start until it serves; the best of 3 starts per
             broker and round, interleaved (seconds, lower is better). Python writes
             and reuses .pyc files there as on a user's machine, even when the shell
             sets PYTHONDONTWRITEBYTECODE

Per load: the medians of each broker and the median of the per-round ratios, oriented so
that **> 1 is better for this checkout** in every row (throughput: this/base; fixture
start time: base/this). Both brokers share the machine, so read 0.9-1.1 as no change.
Results: ``--out``/compare.json and .md (default bench/results/). Exit status 1 when a
median ratio is below --threshold (default 0.9) or a load could not be compared, else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import clients, report

ROOT = report.ROOT
DEFAULT_OUT = ROOT / "bench" / "results"
REPORT_NAME = "compare"
SIDES = ("this", "base")
START_TIMEOUT = 60.0  # seconds for a broker to accept connections
SETTLE_SECONDS = 3.0  # then its background start-up work (kio schemas, ...) settles
PHASE_TIMEOUT = 300.0  # one produce / consume / fill phase, at most
FILL_PER_TXN = 1000  # records per transaction in the read_committed topic
TXN_PRODUCERS = 8
FIXTURE_STARTS = 3  # per broker and round, interleaved; the best one counts
TXN_RECORDS = 10


@dataclass(frozen=True)
class Load:
    key: str  # the name --only takes
    label: str
    unit: str
    higher_is_better: bool
    what: str


LOADS: dict[str, Load] = {load.key: load for load in (
    Load("produce", "produce", "MB/s", True,
         "confluent-kafka, 1 KiB values, acks=all, 4 partitions, linger 5 ms"),
    Load("consume", "read_committed consume", "MB/s", True,
         "confluent-kafka, isolation.level=read_committed, assign 4 partitions, "
         "all records from offset 0 of a committed transactional topic"),
    Load("txn", "transactions 8x10", "txn/s", True,
         f"{TXN_PRODUCERS} transactional producers (processes), "
         f"{TXN_RECORDS} x 1 KiB records per transaction"),
    Load("fixture", "fixture first start", "s", False,
         "the set-up of the first txbroker fixture in a fresh pytest session (its imports "
         "of txbroker.testing + BrokerThread.start() until it serves); best of "
         f"{FIXTURE_STARTS} interleaved starts per broker and round"),
)}


# --- the pure part: ratios, medians, the verdict ----------------------------------------

def round_ratio(this: float | None, base: float | None, higher_is_better: bool) -> float | None:
    """One round's ratio, oriented so that > 1 is better for this checkout: this/base for
    a throughput, base/this for a time. None when either side is missing or not > 0."""
    if this is None or base is None or this <= 0 or base <= 0:
        return None
    return this / base if higher_is_better else base / this


def first_in_round(round_index: int) -> tuple[str, str]:
    """Which broker runs a load first: this, base | base, this | this, base ... (ABBA)."""
    return SIDES if round_index % 2 == 0 else (SIDES[1], SIDES[0])


def start_order(order: tuple[str, str], starts: int) -> list[str]:
    """The fixture starts of one round, interleaved ABBA from the round's first side:
    this, base, base, this, this, base ... for ``starts`` per side."""
    return [side for i in range(starts) for side in (order if i % 2 == 0 else order[::-1])]


def median_ci95(values: Sequence[float | None]) -> tuple[float, float] | None:
    """A distribution-free 95 % confidence interval of the median of ``values`` (the
    known ones): the order statistics x(j) and x(n+1-j) with the largest j for which
    P(x(j) < median < x(n+1-j)) = sum of C(n, i) / 2^n for i in j..n-j is at least 0.95.
    None below 6 values, where even [min, max] covers less (5: 93.8 %). It says whether
    a median ratio near 1.0 can be told from 1.0 by these rounds."""
    known = sorted(v for v in values if v is not None)
    n = len(known)
    for j in range(n // 2, 0, -1):
        if sum(math.comb(n, i) for i in range(j, n - j + 1)) / 2 ** n >= 0.95:
            return known[j - 1], known[n - j]
    return None


def summarize(load: Load, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians of each side and the median of the per-round ratios (each round's pair
    ran back to back, so a paired ratio cancels slow drift better than a ratio of medians)."""
    ratios = [round_ratio(r.get("this"), r.get("base"), load.higher_is_better) for r in rounds]
    return {
        "unit": load.unit,
        "higher_is_better": load.higher_is_better,
        "ratio_is": "this/base" if load.higher_is_better else "base/this",
        "this_median": report.median([r.get("this") for r in rounds], 3),
        "base_median": report.median([r.get("base") for r in rounds], 3),
        "round_ratios": [None if x is None else round(x, 4) for x in ratios],
        "ratio": report.median(ratios, 4),
        "ratio_ci95": ci if (ci := median_ci95(ratios)) is None else [round(x, 4) for x in ci],
    }


def _ci_text(ci: Sequence[float] | None) -> str:
    return "n/a" if not ci else f"{ci[0]:.2f}-{ci[1]:.2f}"


def ratio_line(key: str, s: dict[str, Any]) -> str:
    """One load's median ratio with its confidence interval, for the terminal."""
    ci = s.get("ratio_ci95")
    rounds = sum(x is not None for x in s["round_ratios"])
    interval = f"95% CI {_ci_text(ci)}" if ci else "no 95% CI below 6 rounds"
    return (f"{key}: median ratio {report.fmt(s['ratio'], 2)} ({s['ratio_is']}; {interval}, "
            f"{rounds} rounds)")


def verdict(summaries: dict[str, dict[str, Any]], threshold: float) -> tuple[int, list[str]]:
    """Exit status and the lines saying why: 1 when a median ratio is below ``threshold``
    or a load has no round with both sides measured, else 0."""
    below = [(k, s["ratio"]) for k, s in summaries.items()
             if s["ratio"] is not None and s["ratio"] < threshold]
    missing = [k for k, s in summaries.items() if s["ratio"] is None]
    lines = []
    if below:
        which = ", ".join(f"{k} {r:.2f}" for k, r in below)
        lines.append(f"REGRESSION? median ratio below {threshold:g}: {which} "
                     "(re-run with more --rounds to rule out noise)")
    if missing:
        lines.append(f"NOT COMPARED: {', '.join(missing)} (no round measured both brokers; "
                     "see the errors)")
    if not lines:
        lines.append(f"OK: every median ratio is at least {threshold:g}")
    return (1 if below or missing else 0), lines


def out_paths(out: Path) -> tuple[Path, str]:
    """--out is a directory (compare.json and compare.md go in it) or a file name
    ending in .json or .md (its stem names both files)."""
    if out.suffix in (".json", ".md"):
        return out.parent, out.stem
    return out, REPORT_NAME


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=os.environ.get("BASE") or None,
                    help="the commit (any git ref) to compare with; default: $BASE")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=300_000,
                    help="records per produce round, and in the read_committed topic")
    ap.add_argument("--txn-seconds", type=float, default=5.0)
    ap.add_argument("--only", default=",".join(LOADS),
                    help=f"comma-separated subset of {','.join(LOADS)}")
    ap.add_argument("--threshold", type=float, default=0.9,
                    help="exit 1 when a median ratio is below this (default 0.9)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="output directory (or a .json/.md file name)")
    ap.add_argument("--this-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config override for this checkout's broker only (e.g. "
                         "txbroker.faults=... to price installed faults); repeatable")
    args = ap.parse_args(argv)
    if not args.base:
        ap.error("--base is required (or set BASE): the commit to compare with")
    args.only = [k for k in args.only.split(",") if k]
    bad = [k for k in args.only if k not in LOADS]
    if bad or not args.only:
        ap.error(f"--only takes a subset of {','.join(LOADS)}, not {args.only}")
    if any("=" not in o for o in args.this_override):
        ap.error("--this-override takes KEY=VALUE")
    if args.rounds < 1 or args.messages < 1 or args.txn_seconds <= 0 or args.threshold <= 0:
        ap.error("--rounds, --messages, --txn-seconds and --threshold must be positive")
    return args


# --- the two trees and their brokers ----------------------------------------------------

def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def resolve_base(ref: str) -> tuple[str, str]:
    """(full commit hash, subject) of ``ref``; exits with a clear message if unknown."""
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        sys.exit(f"bench.compare: {ref!r} is not a commit of this repository")
    return commit, git("log", "-1", "--format=%s", commit)


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def broker_package(tree: Path) -> str:
    """Where the broker layer is imported from in ``tree``: txbroker.broker, or the
    top-level broker package of a tree from before the txbroker namespace."""
    return "txbroker.broker" if (tree / "txbroker" / "__init__.py").exists() else "broker"


def testing_module(tree: Path) -> str:
    """The module whose file shows where ``tree``'s fixture came from: the testing layer
    (txbroker.testing) once there is one, else the broker package's testing module (trees
    from before testing/; txbroker.broker.testing, an alias for a while, is gone since)."""
    if (tree / "testing" / "__init__.py").exists():
        return "txbroker.testing"
    return broker_package(tree) + ".testing"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedBroker:
    """One tree's broker as its own process (stdout and stderr to ``log``)."""

    def __init__(self, side: str, tree: Path, data: Path, log: Path,
                 overrides: Sequence[str] = ()) -> None:
        self.side, self.tree, self.data, self.log = side, tree, data, log
        self.overrides = list(overrides)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        module = "txbroker" if (self.tree / "txbroker" / "__main__.py").exists() else "broker"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--data-dir", str(self.data),
             *(arg for o in self.overrides for arg in ("--override", o))],
            cwd=self.tree, env=tree_env(self.tree), stdout=self._log_file,
            stderr=subprocess.STDOUT)

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.side} broker exited ({self.proc.returncode}):\n"
                                   f"{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.side} broker did not accept connections in {timeout:g}s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log_file is not None:
            self._log_file.close()


# --- the loads --------------------------------------------------------------------------

def produce_mbps(bootstrap: str, messages: int, value: bytes) -> float:
    topic = "cmp-p-" + uuid.uuid4().hex[:8]
    clients.create_topic(bootstrap, topic)
    return clients.confluent_produce(bootstrap, topic, messages, value, PHASE_TIMEOUT).mb_per_s


def fill_committed(bootstrap: str, topic: str, messages: int, value: bytes) -> None:
    """``messages`` records over the 4 partitions, in committed transactions."""
    from confluent_kafka import Producer

    clients.create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, **clients.CONFLUENT_PRODUCER,
                  "transactional.id": f"cmp-fill-{topic}"})
    deadline = time.monotonic() + PHASE_TIMEOUT
    p.init_transactions(30)
    i = 0
    while i < messages:
        p.begin_transaction()
        for _ in range(min(FILL_PER_TXN, messages - i)):
            while True:
                try:
                    p.produce(topic, value, partition=i % clients.PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.01)
            i += 1
        p.commit_transaction(60)
        if time.monotonic() > deadline:
            raise clients.PhaseError(f"fill: {i}/{messages} after {PHASE_TIMEOUT:g}s")


def consume_committed_mbps(bootstrap: str, topic: str, messages: int) -> float:
    """A fresh read_committed consumer reads all ``messages`` records from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, **clients.CONFLUENT_CONSUMER,
                         "group.id": "cmp-" + uuid.uuid4().hex[:8],
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    deadline = time.monotonic() + PHASE_TIMEOUT
    got = nbytes = 0
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(clients.PARTITIONS)])
        while got < messages:
            if time.monotonic() > deadline:
                raise clients.PhaseError(f"consume: {got}/{messages} after {PHASE_TIMEOUT:g}s")
            for msg in consumer.consume(num_messages=10_000, timeout=clients.POLL_SECONDS):
                if msg.error() is not None:
                    raise clients.PhaseError(f"consume: {msg.error()}")
                got += 1
                nbytes += len(msg.value())
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return nbytes / elapsed / 1e6


def _txn_worker(bootstrap: str, topic: str, k: int, seconds: float, value: bytes,
                go: Any, out: Any) -> None:
    try:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{k}",
                      "linger.ms": 1, "log_level": 3})
        p.init_transactions(30)
        out.put(("ready", k, 0))
        if not go.wait(120):
            return
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            p.begin_transaction()
            for i in range(TXN_RECORDS):
                p.produce(topic, value, partition=(n + i) % clients.PARTITIONS)
            p.commit_transaction(30)
            n += 1
        out.put(("done", k, n))
    except Exception as e:  # reported to the parent, which fails the measurement
        out.put(("error", k, repr(e)))


def txn_per_s(bootstrap: str, seconds: float, value: bytes) -> float:
    """Transactions per second of TXN_PRODUCERS processes that start together (after
    their init_transactions) and each commit transactions for ``seconds``."""
    topic = "cmp-t-" + uuid.uuid4().hex[:8]
    clients.create_topic(bootstrap, topic)
    ctx = mp.get_context("spawn")  # no fork of a process holding librdkafka threads
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_txn_worker, args=(bootstrap, topic, k, seconds, value, go, out),
                         daemon=True) for k in range(TXN_PRODUCERS)]
    try:
        for p in procs:
            p.start()

        def collect(kind: str, timeout: float) -> list[int]:
            got: list[int] = []
            deadline = time.monotonic() + timeout
            while len(got) < len(procs):
                try:
                    what, k, n = out.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise clients.PhaseError(f"txn: {len(got)}/{len(procs)} producers "
                                             f"{kind} after {timeout:g}s") from None
                if what == "error":
                    raise clients.PhaseError(f"txn: producer {k}: {n}")
                got.append(n)
            return got

        collect("ready", 120)
        start = time.perf_counter()
        go.set()
        total = sum(collect("done", seconds + 120))
        return total / (time.perf_counter() - start)
    except BaseException:
        # A worker inside a librdkafka call (up to 30 s against a dead broker) sees
        # Ctrl-C only when that call returns: do not wait for it.
        for p in procs:
            if p.is_alive():
                p.kill()
        raise
    finally:
        go.set()
        deadline = time.monotonic() + 10
        for p in procs:
            if p.pid is not None:
                p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


# The fixture's first start is timed inside a real pytest session (the installed plugins
# autoloaded, as in a user's session; the txbroker plugin's module comes from the tree on
# PYTHONPATH): from the txbroker fixture's set-up call to its yield, i.e. the plugin's
# own imports, BrokerThread's and the start, whatever each tree's fixture does.
FIXTURE_CONFTEST = """\
import importlib, json, os, time
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        if fixturedef.argname == "txbroker":
            seconds = time.perf_counter() - start
            testing = importlib.import_module(os.environ["BENCH_COMPARE_TESTING"])
            with open(os.environ["BENCH_COMPARE_RESULT"], "w") as f:
                json.dump({"seconds": seconds, "file": testing.__file__}, f)
"""

FIXTURE_TEST = """\
import socket

def test_first_txbroker_fixture(txbroker):
    socket.create_connection((txbroker.host, txbroker.port), 10).close()
"""


def fixture_session_env(tree: Path, result_file: Path) -> dict[str, str]:
    """The environment of the pytest session that times ``tree``'s first fixture."""
    env = {**tree_env(tree), "BENCH_COMPARE_TESTING": testing_module(tree),
           "BENCH_COMPARE_RESULT": str(result_file)}
    # A user's first fixture imports cached bytecode (pip compiles it at install; Python
    # writes it at the first import). With PYTHONDONTWRITEBYTECODE inherited, every
    # session would compile ~90 modules from source (~0.25 s) and time that instead.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def fixture_start_s(tree: Path, scratch: Path) -> float:
    """Seconds the first ``txbroker`` fixture of a fresh pytest session takes to set up,
    with PYTHONPATH set to ``tree`` (``scratch``: a new directory for the session)."""
    scratch.mkdir(parents=True)
    (scratch / "conftest.py").write_text(FIXTURE_CONFTEST)
    (scratch / "test_fixture_start.py").write_text(FIXTURE_TEST)
    result_file = scratch / "result.json"
    env = fixture_session_env(tree, result_file)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "--basetemp", str(scratch / "tmp"), "test_fixture_start.py"],
        cwd=scratch, env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0 or not result_file.exists():
        raise clients.PhaseError(f"fixture start failed ({done.returncode}): "
                                 f"{done.stdout.strip().splitlines()[-3:]}")
    result = json.loads(result_file.read_text())
    if not Path(result["file"]).resolve().is_relative_to(tree.resolve()):
        raise clients.PhaseError(f"fixture imported {result['file']}, not from {tree}")
    return float(result["seconds"])


# --- the run ----------------------------------------------------------------------------

def measure_all(args: argparse.Namespace, trees: dict[str, Path], work: Path,
                brokers: dict[str, ServedBroker]) -> tuple[dict[str, list[dict[str, Any]]],
                                                            list[str]]:
    value = os.urandom(1024)  # incompressible (compression is off anyway), the same for both
    errors: list[str] = []
    consume_topic = "cmp-c-" + uuid.uuid4().hex[:8]
    if "consume" in args.only:
        for side in SIDES:
            t0 = time.monotonic()
            fill_committed(brokers[side].bootstrap, consume_topic, args.messages, value)
            print(f"filled {consume_topic} on {side} ({args.messages:,} records in "
                  f"committed transactions of {FILL_PER_TXN}) in "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
    samples = iter(range(1_000_000))
    if "fixture" in args.only:  # untimed: the base tree compiles its .pyc files here
        for side in SIDES:
            fixture_start_s(trees[side], work / f"fixture-{side}-{next(samples)}")

    runners: dict[str, Callable[[str], float]] = {
        "produce": lambda side: produce_mbps(brokers[side].bootstrap, args.messages, value),
        "consume": lambda side: consume_committed_mbps(brokers[side].bootstrap, consume_topic,
                                                       args.messages),
        "txn": lambda side: txn_per_s(brokers[side].bootstrap, args.txn_seconds, value),
    }

    def fixture_round(order: tuple[str, str], entry: dict[str, Any]) -> None:
        starts: dict[str, list[float]] = {side: [] for side in SIDES}
        for side in start_order(order, FIXTURE_STARTS):
            starts[side].append(round(fixture_start_s(
                trees[side], work / f"fixture-{side}-{next(samples)}"), 4))
        entry.update({side: min(starts[side]) for side in SIDES})
        entry["starts"] = starts

    rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in args.only}
    for r in range(args.rounds):
        order = first_in_round(r)
        for key in args.only:
            load = LOADS[key]
            entry: dict[str, Any] = {"first": order[0]}
            if key == "fixture":  # no served broker involved
                try:
                    fixture_round(order, entry)
                except Exception as e:
                    entry.update(this=None, base=None)
                    errors.append(f"round {r + 1} fixture: {e}")
            else:
                for side in order:
                    if not brokers[side].alive():
                        entry[side] = None
                        errors.append(f"round {r + 1} {key} {side}: broker is gone")
                        continue
                    try:
                        entry[side] = round(runners[key](side), 4)
                    except Exception as e:  # one failed measurement: recorded, the run goes on
                        entry[side] = None
                        errors.append(f"round {r + 1} {key} {side}: {e}")
            rounds[key].append(entry)
            ratio = round_ratio(entry["this"], entry["base"], load.higher_is_better)
            print(f"round {r + 1}/{args.rounds}  {load.label:24s} "
                  f"this {report.fmt(entry['this'], 3):>9s}  base {report.fmt(entry['base'], 3):>9s}"
                  f" {load.unit:5s}  ratio {report.fmt(ratio, 2):>5s}  ({order[0]} first)",
                  flush=True)
    return rounds, errors


def render_markdown(rep: dict[str, Any]) -> str:
    m, o, base = rep["machine"], rep["options"], rep["base"]
    lines = [
        "# This checkout against a base commit (bench.compare)",
        "",
        f"- date: {m['date']}",
        f"- command: `{rep['command']}`",
        f"- this: {m['txbroker_commit']}; base: `{base['ref']}` = {base['commit'][:10]} "
        f"\"{base['subject']}\"",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} logical cores, "
        f"{m['memory_gb']} GB RAM; python {m['python']}; confluent-kafka "
        f"{m['confluent_kafka']}; load average at start {m['loadavg_start']}, "
        f"at end {m['loadavg_end']}",
        "- both brokers ran at the same time on this machine, each from its own tree "
        "(`python -m txbroker serve`, defaults, fresh data dir), the same Python; "
        f"{o['rounds']} rounds, each load alternating which broker goes first (ABBA); "
        f"{o['messages']:,} records of 1 KiB per produce round and in the read_committed "
        f"topic; transactions for {o['txn_seconds']:g} s; wall time "
        f"{rep['wall_seconds']:.0f} s",
        *([f"- this checkout's broker ran with {o['this_overrides']} config override(s) "
           "(`--this-override`, see the command)"] if o.get("this_overrides") else []),
        "- **ratio > 1 is better for this checkout in every row**: throughput this/base, "
        "fixture start time base/this (lower time is better); it is the median of the "
        "per-round ratios. Both brokers share the machine: read 0.9-1.1 as no change. "
        "The 95 % confidence interval of that median (order statistics, from 6 rounds) "
        "says whether the rounds can tell it from 1.0.",
        "",
        "| load | unit | this (median) | base (median) | ratio, >1 = better | 95% CI | "
        "per round |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for key, s in rep["summary"].items():
        load = LOADS[key]
        unit = load.unit + ("" if load.higher_is_better else " (lower is better)")
        per_round = " ".join(report.fmt(x, 2) for x in s["round_ratios"])
        lines.append(f"| {load.label} | {unit} | {report.fmt(s['this_median'], 3)} "
                     f"| {report.fmt(s['base_median'], 3)} "
                     f"| **{report.fmt(s['ratio'], 2)}** ({s['ratio_is']}) "
                     f"| {_ci_text(s.get('ratio_ci95'))} | {per_round} |")
    lines += ["", "Loads:", ""]
    lines += [f"- {LOADS[k].label}: {LOADS[k].what}" for k in rep["summary"]]
    lines += ["", *rep["verdict"]]
    if rep["errors"]:
        lines += ["", "## Errors", ""] + [f"- {e}" for e in rep["errors"]]
    lines.append("")
    return "\n".join(lines)


def run(args: argparse.Namespace, command: str) -> tuple[int, dict[str, Any]]:
    try:
        import confluent_kafka
    except ImportError:
        sys.exit("bench.compare needs confluent-kafka: run it with .venv/bin/python "
                 "after `make install`")
    commit, subject = resolve_base(args.base)
    machine = report.machine_info(
        confluent_kafka=f"{report.package_version('confluent-kafka')} "
                        f"(librdkafka {confluent_kafka.libversion()[0]})")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    tree = work / "base"
    brokers: dict[str, ServedBroker] = {}
    added = False
    try:
        done = subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"git worktree add failed: {done.stderr.strip()}")
        added = True
        trees = {"this": ROOT, "base": tree}
        print(f"this: {ROOT} ({machine['txbroker_commit']}); base: {args.base} = "
              f"{commit[:10]} {subject!r} in {tree}", flush=True)
        for side in SIDES:
            brokers[side] = ServedBroker(
                side, trees[side], work / f"{side}-data", work / f"{side}.log",
                args.this_override if side == "this" else ())
            brokers[side].start()
        for side in SIDES:
            brokers[side].wait_serving()
        time.sleep(SETTLE_SECONDS)
        rounds, errors = measure_all(args, trees, work, brokers)
    finally:
        # A second Ctrl-C must not leave the worktree or a broker behind.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for b in brokers.values():
                b.stop()
            if added:
                gone = subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                                      cwd=ROOT, capture_output=True)
                if gone.returncode != 0:
                    shutil.rmtree(tree, ignore_errors=True)
                    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
            shutil.rmtree(work, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, previous)
    summary = {k: summarize(LOADS[k], rounds[k]) for k in args.only}
    code, lines = verdict(summary, args.threshold)
    return code, {
        "command": command,
        "machine": machine | {"loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "base": {"ref": args.base, "commit": commit, "subject": subject},
        "options": {"rounds": args.rounds, "messages": args.messages,
                    "txn_seconds": args.txn_seconds, "only": args.only,
                    "threshold": args.threshold, "value_size": 1024,
                    "partitions": clients.PARTITIONS,
                    "confluent_producer": clients.CONFLUENT_PRODUCER,
                    "fill_records_per_transaction": FILL_PER_TXN,
                    "this_overrides": len(args.this_override)},
        "wall_seconds": round(time.monotonic() - started, 1),
        "rounds": rounds,
        "summary": summary,
        "verdict": lines,
        "exit_status": code,
        "errors": errors,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = report.command_line("bench.compare", argv)
    report.stop_on_sigterm()
    code, rep = run(args, command)
    out_dir, name = out_paths(args.out)
    report.write_report(out_dir, name, rep, render_markdown)
    for key, s in rep["summary"].items():
        print(ratio_line(key, s))
    for line in rep["verdict"]:
        print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
