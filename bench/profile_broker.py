"""Profile txbroker under the confluent-kafka produce and consume loads with py-spy.

    .venv/bin/pip install py-spy      # investigation only; not a project dependency
    .venv/bin/python -m bench.profile_broker [--messages N] [--native] [--out DIR]

Starts txbroker with its defaults, runs the same produce then consume phase as
bench.throughput, records each phase with ``py-spy record -f raw`` (collapsed
stacks, readable by flamegraph.pl and speedscope) and prints the hottest frames
of the event-loop thread.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import clients
from .brokers import TxBroker
from .throughput import DEFAULT_OUT


def find_py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def top_frames(path: Path, limit: int = 15, thread: str = "MainThread") -> str:
    """Self and inclusive sample shares of ``thread``'s frames in a raw py-spy file."""
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        # With --threads the first frame names the thread; without, keep everything.
        if frames[0].startswith("thread") and thread not in frames[0]:
            continue
        n = int(count)
        total += n
        self_time[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return f"{path}: no samples\n"
    out = [f"{path}: {total} samples of {thread}", "  self:"]
    out += [f"    {100 * n / total:5.1f}%  {f}" for f, n in self_time.most_common(limit)]
    out.append("  inclusive:")
    out += [f"    {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(limit + 10)
            if not f.startswith(("thread", "process", "<module>", "_run_"))][:limit]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_broker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=250, help="samples per second")
    ap.add_argument("--native", action="store_true",
                    help="include C frames (pauses the broker per sample: slows it down)")
    ap.add_argument("--idle", action="store_true", help="include threads waiting (fsync pool)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    spy = find_py_spy()
    if spy is None:
        print("py-spy not found: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    value = os.urandom(1024)
    with TxBroker() as broker:
        topic = "profile"
        clients.create_topic(broker.bootstrap, topic)
        for phase in ("produce", "consume"):
            path = args.out / f"profile-{phase}.txt"
            cmd = [spy, "record", "-p", str(broker.pid), "-r", str(args.rate), "-f", "raw",
                   "-o", str(path), "--threads"]
            # --native has to stop the process to unwind C stacks; py-spy refuses
            # --nonblocking with it.
            cmd += ["--native"] if args.native else ["--nonblocking"]
            cmd += ["--idle"] if args.idle else []
            recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True)
            try:
                time.sleep(1.0)  # py-spy attaches
                if phase == "produce":
                    result = clients.confluent_produce(broker.bootstrap, topic, args.messages,
                                                       value, timeout=300)
                else:
                    result = clients.confluent_consume(broker.bootstrap, topic, args.messages,
                                                       timeout=300)
            finally:
                recorder.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                try:
                    _, err = recorder.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    recorder.kill()
                    err = recorder.communicate()[1]
            print(f"{phase}: {result.mb_per_s:.1f} MB/s over {result.seconds:.2f} s")
            if path.exists():
                print(top_frames(path))
            else:
                print(f"py-spy wrote nothing: {err.strip()[-500:]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
