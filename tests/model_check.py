"""The deep random search of the stateful models (``make model-check``).

    .venv/bin/python -m tests.model_check [--runs 5] [--scale 10] [--seed S]

`make test` runs every hypothesis model with a seed derived from its name and no
example database (tests/conftest.py): reproducible, and shallow. This runs each model
(every test marked ``model``: the RuleBasedStateMachines, found by conftest) ``--runs``
times, each run under a fresh random seed that is printed first, with ``--scale`` times
the examples the suite uses and no example database. It prints, per model, how many
runs found something and the seeds that did, and exits 1 if any did. Reproduce a
finding with the printed command (same seed, same scale), then keep it as an explicit
regression case in the suite. Run it for every change under coordinator/ or storage/.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(seed: int, scale: int, select: list[str]) -> tuple[dict[str, str], float, int]:
    """One pytest run of the models: {test id: "passed" | "failed: ..."}, seconds, exit."""
    env = {**os.environ, "TXBROKER_HYPOTHESIS_PROFILE": "model-check",
           "TXBROKER_MODEL_CHECK_SCALE": str(scale)}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "model",
               f"--hypothesis-seed={seed}", f"--junitxml={report}", *select]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        seconds = time.monotonic() - started
        results: dict[str, str] = {}
        if report.exists():
            for case in ET.parse(report).getroot().iter("testcase"):
                name = f"{case.get('classname')}::{case.get('name')}"
                bad = case.find("failure")
                if bad is None:
                    bad = case.find("error")
                results[name] = "passed" if bad is None else \
                    "failed: " + (bad.get("message") or "")[:200]
        if proc.returncode not in (0, 1) or not results:
            print(proc.stdout[-4000:])
        elif proc.returncode == 1:
            print(proc.stdout[-6000:])
        return results, seconds, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=int(os.environ.get("MODEL_CHECK_RUNS", 5)))
    ap.add_argument("--scale", type=int, default=int(os.environ.get("MODEL_CHECK_SCALE", 10)),
                    help="times the examples each model runs in make test (default 10)")
    ap.add_argument("--seed", type=int, help="the first run's seed (default: random)")
    ap.add_argument("paths", nargs="*", default=["tests/unit"],
                    help="test files or folders to search for models (default tests/unit)")
    args = ap.parse_args(argv)
    rng = random.SystemRandom()
    found: dict[str, list[int]] = defaultdict(list)
    ran: dict[str, int] = defaultdict(int)
    failed_runs = 0
    for i in range(args.runs):
        seed = args.seed + i if args.seed is not None else rng.randrange(2**32)
        print(f"run {i + 1}/{args.runs}: seed {seed}, scale {args.scale}", flush=True)
        results, seconds, code = run_once(seed, args.scale, args.paths)
        if not results:
            print(f"  pytest exited {code} without results")
            failed_runs += 1
            continue
        for name, outcome in sorted(results.items()):
            ran[name] += 1
            if outcome != "passed":
                found[name].append(seed)
                print(f"  FOUND {name}: {outcome}")
        print(f"  {len(results)} models in {seconds:.0f} s, "
              f"{sum(o != 'passed' for o in results.values())} found something", flush=True)
    print(f"\nmodel check: {args.runs} runs, scale {args.scale}")
    for name in sorted(ran):
        seeds = found.get(name, [])
        line = f"  {name}: found something in {len(seeds)} of {ran[name]} runs"
        if seeds:
            line += f" (seeds {', '.join(map(str, seeds))})"
        print(line)
    if found or failed_runs:
        print("reproduce: TXBROKER_HYPOTHESIS_PROFILE=model-check "
              f"TXBROKER_MODEL_CHECK_SCALE={args.scale} .venv/bin/python -m pytest "
              "-p no:cacheprovider -m model --hypothesis-seed=SEED TEST_ID")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
