"""Frame fuzzer: mutated real client frames against a broker PROCESS.

    .venv/bin/python -m tests.fuzz.frames --frames 1000000 --seed 1 [--connections 8]

A process, not an in-process broker, because what this hunts includes native aborts
(kio 0.6.5 died with SIGABRT on one frame) that would take the test runner with it.
Frames (tests/fuzz/mutate.py) go out on several connections, each waiting for its
answer or for the broker to close the connection. After every chunk:

- the broker process is alive;
- its log has no traceback, "Task exception was never retrieved", ERROR or CRITICAL;
- a normal client (confluent-kafka, acks=all) produces and reads its values back.

At the end the broker gets SIGTERM (must exit 0), starts again on the same data, and
every value acknowledged to the normal client during the run must be there.

The summary gives the seed, and per API key (as the frame's header says, after the
mutations) the frames sent, answered, closed by the broker and left unanswered; with
``--require-coverage`` the run refuses to start if an API version the broker advertises
has no corpus frame, and fails if an advertised API got no frame at all.

A failure is replayed frame by frame on a fresh broker to find the one frame that
does it (if one does), and saved as JSON (frames in hex + the log excerpt) under
``tests/fuzz/regressions/``, which tests/fuzz/test_fuzz.py replays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from txbroker.broker.handlers import supported_versions
from txbroker.protocol.messages import api_name
from txbroker.testing import BrokerProcess

from .corpus import UPCOMING_APIS, api_of, coverage_gaps, load
from .mutate import mutated, source_index

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
BAD_LOG = re.compile(r"Traceback|Task exception was never retrieved|Fatal Python error"
                     r"| ERROR | CRITICAL ")
CANARY_TOPIC = "fuzz-canary"
CANARY_PARTITIONS = 2
CANARY_DEADLINE = 20.0  # s for one produce + read back: longer is a stalled broker


_EXCEPTION_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Exit|Interrupt)\b.*")
_NUMBERS = re.compile(r"\d+")
_PATHS = re.compile(r"'/[^']*'")


def signature(kind: str, detail: str, log: Sequence[str]) -> str:
    """What makes two findings the same bug: the kind and the exception raised (else the
    detail), without the numbers (ports, offsets, times) that differ between runs."""
    exc = [m.group(0) for line in log if (m := _EXCEPTION_LINE.match(line.strip()))]
    what = exc[0] if exc else detail.split(": ", 1)[-1] if kind == "log" else detail
    if kind == "log" and " txbroker" in what:
        what = what.split(" txbroker", 1)[1]
    return f"{kind}: {_NUMBERS.sub('N', _PATHS.sub('PATH', what.strip()))}"


def known_signatures(directory: Path = None) -> dict[str, str]:  # type: ignore[assignment]
    """Signatures of the saved regression cases still open -> the issue that tracks them."""
    out: dict[str, str] = {}
    for path in sorted((directory or REGRESSIONS).glob("*.json")):
        case = json.loads(path.read_text())
        if case.get("open"):
            # "also": what the same bug leaves behind (a storm's EMFILE in later chunks).
            for sig in [case["signature"], *case.get("also", [])]:
                out[sig] = case["open"]
    return out


@dataclass
class Finding:
    kind: str             # crash | log | canary | shutdown | data
    detail: str
    frames: list[bytes]   # size-prefixed, in the order sent (one if minimized)
    labels: list[str]
    log: list[str]
    minimized: bool = False
    saved_to: str = ""
    signature: str = ""
    repeats: int = 1      # chunks in which the same signature was seen
    first: int = 0        # index of the chunk's first frame
    count: int = 0        # frames in the chunk


@dataclass
class Result:
    frames: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    canary_acked: int = 0
    seed: int = 0
    # API key as sent (-1: a frame too short for one) -> outcome -> frames ("sent": all)
    per_api: dict[int, Counter] = field(default_factory=dict)
    seeded: Counter = field(default_factory=Counter)  # API key of the corpus frame mutated

    def count(self, frames: Sequence[bytes], outcomes: Sequence[str | None],
              sources: Sequence[int]) -> None:
        for frame, outcome in zip(frames, outcomes, strict=True):
            key = struct.unpack_from(">h", frame, 4)[0] if len(frame) >= 6 else -1
            c = self.per_api.setdefault(key, Counter())
            c["sent"] += 1
            c[outcome or "unsent"] += 1
        self.seeded.update(sources)

    @property
    def rate(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0


class BrokerUnderTest:
    """A broker process whose log is scanned incrementally (and trimmed, for long runs)."""

    def __init__(self, data_dir: str, overrides: dict[str, str] | None = None) -> None:
        self.proc = BrokerProcess(data_dir, overrides)
        self._pos = 0

    def start(self) -> None:
        self.proc.start()
        self._pos = 0

    @property
    def port(self) -> int:
        return self.proc.port

    def alive(self) -> bool:
        return self.proc.running

    def new_bad_lines(self, context: int = 30) -> list[str]:
        """Bad log lines since the last call, with the lines around them; trims the
        lines already scanned (the pump thread only appends, so this is safe)."""
        out = self.proc.output
        end = len(out)
        lines = out[self._pos:end]
        bad: list[str] = []
        for n, line in enumerate(lines):
            if BAD_LOG.search(line):
                bad = lines[n:n + context]
                break
        del out[:end]
        self._pos = 0
        return bad

    def tail(self, n: int = 40) -> list[str]:
        return self.proc.output[-n:]


class Canary:
    """The well-behaved client: acks=all produce, read back, all of it intact at the end."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        self.bootstrap = bootstrap
        quiet = {"log_level": 2}  # librdkafka's reconnect chatter after a restart
        admin = AdminClient({"bootstrap.servers": bootstrap, **quiet})
        admin.create_topics([NewTopic(CANARY_TOPIC, CANARY_PARTITIONS, 1)])[CANARY_TOPIC].result(30)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 0, "message.timeout.ms": 15000, **quiet})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-canary",
                                  "enable.auto.commit": False, **quiet})
        self.acked: dict[tuple[int, int], bytes] = {}
        self.rounds = 0

    def check(self, n: int = 3) -> str | None:
        """Produce n values to one partition and read them back; None if all went well."""
        from confluent_kafka import TopicPartition

        partition = self.rounds % CANARY_PARTITIONS
        self.rounds += 1
        deadline = time.monotonic() + CANARY_DEADLINE
        results: list = []
        values = [b"canary-%d-%d" % (self.rounds, i) + b"x" * 100 for i in range(n)]
        for v in values:
            self.producer.produce(CANARY_TOPIC, v, partition=partition,
                                  on_delivery=lambda err, msg: results.append((err, msg)))
        self.producer.flush(max(deadline - time.monotonic(), 0.1))
        if len(results) < n:
            return f"canary: {n - len(results)} of {n} acks=all produces unanswered in " \
                   f"{CANARY_DEADLINE:.0f}s"
        errors = [str(err) for err, _ in results if err is not None]
        if errors:
            return f"canary: produce failed: {errors[0]}"
        offsets = {}
        for _, msg in results:
            offsets[msg.offset()] = msg.value()
            self.acked[(partition, msg.offset())] = msg.value()
        self.consumer.assign([TopicPartition(CANARY_TOPIC, partition, min(offsets))])
        got: dict[int, bytes] = {}
        while len(got) < len(offsets) and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is not None and not msg.error() and msg.offset() in offsets:
                got[msg.offset()] = msg.value()
        if got != offsets:
            return f"canary: read back {len(got)} of {len(offsets)} values (or different bytes)"
        return None

    def verify_all(self, timeout: float = 60) -> str | None:
        """Every acknowledged value, at its offset (after a restart)."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "fuzz-verify",
                      "enable.auto.commit": False, "log_level": 2})
        c.assign([TopicPartition(CANARY_TOPIC, p, 0) for p in range(CANARY_PARTITIONS)])
        want = dict(self.acked)
        seen: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + timeout
        try:
            while len(seen) < len(want) and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None or msg.error():
                    continue
                key = (msg.partition(), msg.offset())
                if key in want:
                    seen[key] = msg.value()
        finally:
            c.close()
        missing = [k for k in want if seen.get(k) != want[k]]
        if missing:
            return f"{len(missing)} of {len(want)} acknowledged values missing or changed " \
                   f"after the restart (first: partition {missing[0][0]} offset {missing[0][1]})"
        return None

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(5)


async def _open(port: int):
    return await asyncio.open_connection("127.0.0.1", port)


async def _exchange(conn, frame: bytes, timeout: float) -> str:
    """Send one frame; 'answered', 'closed' (the broker hung up) or 'silent' (no
    answer in time: an acks=0 produce, a long fetch wait, a lying size prefix)."""
    reader, writer = conn
    try:
        writer.write(frame)
        await asyncio.wait_for(writer.drain(), timeout)
        head = await asyncio.wait_for(reader.readexactly(4), timeout)
        (size,) = struct.unpack(">i", head)
        await asyncio.wait_for(reader.readexactly(size), timeout)
        return "answered"
    except (asyncio.IncompleteReadError, ConnectionError):
        return "closed"
    except TimeoutError:
        return "silent"


async def send_frames(port: int, frames: Sequence[bytes], connections: int,
                      timeout: float, max_seconds: float = 60,
                      each: list[str | None] | None = None) -> Counter:
    """Every frame once, over ``connections`` connections; a connection the broker
    closed (or that went silent) is replaced by a new one. A broker that stopped
    answering would make this last frames × timeout: after ``max_seconds`` the rest of
    the frames are counted 'unsent' (and the health check says why). ``each``, if
    given, gets every frame's outcome at the frame's index."""
    outcomes: Counter = Counter()
    it = iter(enumerate(frames))
    if each is None:
        each = [None] * len(frames)
    deadline = time.monotonic() + max_seconds

    async def worker() -> None:
        conn = None
        try:
            for i, frame in it:
                if time.monotonic() > deadline:
                    outcomes["unsent"] += 1
                    each[i] = "unsent"
                    continue
                if conn is None:
                    try:
                        conn = await asyncio.wait_for(_open(port), timeout)
                    except (OSError, TimeoutError):
                        outcomes["refused"] += 1  # not accepting: the health check says why
                        each[i] = "refused"
                        continue
                outcome = await _exchange(conn, frame, timeout)
                outcomes[outcome] += 1
                each[i] = outcome
                if outcome != "answered":
                    conn[1].close()
                    conn = None
        finally:
            if conn is not None:
                conn[1].close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return outcomes


def replay_each(frames: Sequence[bytes], want: str | None = None, timeout: float = 0.5,
                limit_s: float = 120, overrides: dict[str, str] | None = None,
                ) -> tuple[int | None, list[str]]:
    """Send the frames one by one (one connection, in order) to a fresh broker; the
    index of the first after which the broker died or logged a bad line (of signature
    ``want``, if given: another bug met on the way is not this one's culprit), None if
    none does within ``limit_s``; and the log excerpt."""
    with tempfile.TemporaryDirectory(prefix="fuzz-replay-") as d:
        broker = BrokerUnderTest(d, overrides)
        broker.start()
        try:
            stop_at = time.monotonic() + limit_s

            async def run() -> tuple[int | None, list[str]]:
                conn = None
                for i, frame in enumerate(frames):
                    if time.monotonic() > stop_at:
                        break
                    try:
                        if conn is None:
                            conn = await _open(broker.port)
                        if await _exchange(conn, frame, timeout) != "answered":
                            conn[1].close()
                            conn = None
                    except OSError:
                        conn = None
                    await asyncio.sleep(0.01)  # let a log line from this frame arrive
                    if not broker.alive():
                        return i, broker.tail()
                    bad = broker.new_bad_lines()
                    if bad and (want is None or signature("log", bad[0], bad) == want):
                        return i, bad
                return None, []

            return asyncio.run(run())
        finally:
            broker.proc.kill()


def case_frames(case: dict) -> list[bytes]:
    """The frames of a saved case: its hex frames, else its chunk rebuilt from the seed."""
    if case["frames_hex"]:
        return [bytes.fromhex(h) for h in case["frames_hex"]]
    chunk = case["chunk"]
    corpus = load()
    return [mutated(corpus, chunk["seed"], i)[0]
            for i in range(chunk["first"], chunk["first"] + chunk["count"])]


def save(finding: Finding, seed: int, first_index: int, directory: Path,
         overrides: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{finding.kind}-seed{seed}-frame{first_index}.json"
    path.write_text(json.dumps({
        "kind": finding.kind,
        "signature": finding.signature,
        "detail": finding.detail,
        "found_by": f"python -m tests.fuzz.frames --seed {seed} (frame {first_index})",
        **({"broker_config": overrides} if overrides else {}),
        "minimized": finding.minimized,
        "labels": finding.labels,
        "frames_hex": [f.hex() for f in finding.frames],
        # Not minimized: the chunk, rebuilt by tests.fuzz.mutate.mutated(load(), seed, i).
        "chunk": {"seed": seed, "first": finding.first, "count": finding.count},
        "log": [line.rstrip("\n") for line in finding.log],
    }, indent=1) + "\n")
    return path


def fuzz(frames: int, seed: int = 1, connections: int = 8, chunk: int = 2000,
         timeout: float = 1.0, save_dir: Path | None = REGRESSIONS, minimize: bool = True,
         progress: bool = False, data_dir: str | None = None,
         max_seconds: float = float("inf"), stop_when_broken: bool = False,
         overrides: dict[str, str] | None = None) -> Result:
    """Run the fuzzer; see the module docstring. Findings are saved when ``save_dir``.
    ``stop_when_broken``: end the run at the first crash or stalled normal client (what
    follows, on a broken broker, says little and takes long). ``overrides``: broker
    config keys (a feature that is off by default, say)."""
    corpus = load()
    result = Result(seed=seed)
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="fuzz-broker-")
        data_dir = tmp.name
    broker = BrokerUnderTest(data_dir, overrides)
    broker.start()
    canary = Canary(broker.proc.bootstrap)
    started = time.monotonic()
    last_print = started

    seen: dict[str, Finding] = {}

    def record(kind: str, detail: str, batch: list[bytes], labels: list[str], first: int,
               log: list[str]) -> None:
        sig = signature(kind, detail, log)
        if sig in seen:  # the same bug again: counted, not minimized or saved twice
            seen[sig].repeats += 1
            return
        finding = Finding(kind, detail, batch, labels, log, signature=sig, first=first,
                          count=len(batch))
        seen[sig] = finding
        if minimize and kind in ("crash", "log"):
            want = sig if kind == "log" else None
            culprit, _ = replay_each(batch, want, overrides=overrides)
            # A slow effect (a partition storm) shows up frames after its cause: only a
            # frame that does it again on its own, on a fresh broker, is the culprit.
            if culprit is not None:
                again, replay_log = replay_each([batch[culprit]], want, overrides=overrides)
                if again is not None:
                    finding.frames, finding.labels = [batch[culprit]], [labels[culprit]]
                    finding.log, finding.minimized = replay_log or log, True
                    first += culprit
        if not finding.minimized and len(finding.frames) > 50:
            # Any frame of the chunk can be rebuilt from (seed, index); keep the file small.
            finding.frames, finding.labels = finding.frames[:0], finding.labels[:0]
        if save_dir is not None:
            finding.saved_to = str(save(finding, seed, first, save_dir, overrides))
        result.findings.append(finding)
        if progress:
            print(f"FOUND {kind}: {detail} -> {finding.saved_to or '(not saved)'}", flush=True)

    def restart(at: int) -> bool:
        """Start the broker again on its data; a broker that cannot is a finding, and
        the run ends there (its data dir is what the bug left)."""
        try:
            broker.start()
            return True
        except RuntimeError as e:
            record("restart", str(e).splitlines()[-1], [], [], at, broker.tail())
            result.seconds = time.monotonic() - started
            return False

    try:
        for start in range(0, frames, chunk):
            if time.monotonic() - started > max_seconds:
                break
            built = [mutated(corpus, seed, i) for i in range(start, min(start + chunk, frames))]
            batch = [f for f, _ in built]
            labels = [w for _, w in built]
            unsent_before = result.outcomes.get("unsent", 0)
            each: list[str | None] = [None] * len(batch)
            result.outcomes += asyncio.run(send_frames(broker.port, batch, connections, timeout,
                                                       each=each))
            result.frames += len(batch) - result.outcomes.get("unsent", 0) + unsent_before
            result.count(batch, each, [api_of(corpus[source_index(len(corpus), seed, i)])[0]
                                       for i in range(start, start + len(batch))])
            time.sleep(0.05)  # the last frames' log lines
            if not broker.alive():
                rc = broker.proc.proc.poll() if broker.proc.proc else None
                record("crash", f"broker exited with {rc}", batch, labels, start, broker.tail())
                if stop_when_broken:
                    return result
                if not restart(start):
                    return result
                continue
            bad = broker.new_bad_lines()
            if bad:
                record("log", bad[0].strip(), batch, labels, start, bad)
            problem = canary.check()
            if problem:
                record("canary", problem, batch, labels, start, broker.tail())
                if stop_when_broken:
                    return result
                rc = broker.proc.terminate(60)
                if rc != 0:
                    record("shutdown", f"SIGTERM exit code {rc}", [], [], start, broker.tail())
                if not restart(start):
                    return result
            now = time.monotonic()
            if progress and (now - last_print > 10 or result.frames >= frames):
                last_print = now
                elapsed = now - started
                print(f"{result.frames:,} frames in {elapsed:,.0f}s ({result.frames / elapsed:,.0f}"
                      f"/s) {dict(result.outcomes)} findings: {len(result.findings)}", flush=True)
        result.seconds = time.monotonic() - started
        result.canary_acked = len(canary.acked)
        rc = broker.proc.terminate(60)
        if rc != 0:
            record("shutdown", f"SIGTERM exit code {rc}", [], [], frames, broker.tail())
        if not restart(frames):
            return result
        lost = canary.verify_all()
        if lost:
            record("data", lost, [], [], frames, broker.tail())
        canary.close()
    finally:
        result.seconds = result.seconds or time.monotonic() - started
        broker.proc.kill()
        if tmp is not None:
            tmp.cleanup()
    return result


def coverage_table(result: Result, advertised: list[tuple[int, int, int]]) -> tuple[
        list[str], list[int]]:
    """The summary's per-API lines (every advertised API, the upcoming ones, then any
    other key the mutations wrote), and the advertised API keys no frame was sent to."""
    ranges = {key: (low, high) for key, low, high in advertised}
    shown = sorted(ranges) + [k for k in UPCOMING_APIS if k not in ranges]
    other: Counter = Counter()
    for key, c in result.per_api.items():
        if key not in ranges and key not in UPCOMING_APIS:
            other += c
    lines = [f"{'api key':>7} {'name':<32} {'served':>7} {'seeded':>8} {'sent':>8} "
             f"{'answered':>8} {'closed':>8} {'silent':>7}"]

    def line(key: str, name: str, served: str, seeded: int, c: Counter) -> str:
        return (f"{key:>7} {name:<32} {served:>7} {seeded:>8,} {c['sent']:>8,} "
                f"{c['answered']:>8,} {c['closed']:>8,} {c['silent']:>7,}")

    for key in shown:
        served = f"v{ranges[key][0]}-{ranges[key][1]}" if key in ranges else "no"
        lines.append(line(str(key), api_name(key), served, result.seeded.get(key, 0),
                          result.per_api.get(key, Counter())))
    lines.append(line("other", "(keys nobody serves, short frames)", "no", 0, other))
    missing = [key for key in sorted(ranges) if not result.per_api.get(key, {}).get("sent")]
    return lines, missing


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--chunk", type=int, default=2000, help="frames between health checks")
    p.add_argument("--timeout", type=float, default=1.0, help="s to wait for each answer")
    p.add_argument("--save-dir", type=Path, default=REGRESSIONS)
    p.add_argument("--no-minimize", action="store_true")
    p.add_argument("--data-dir", default=None, help="broker data dir (default: a temp dir)")
    p.add_argument("--max-seconds", type=float, default=float("inf"))
    p.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker config key for the fuzzed broker (repeatable), e.g. "
                        "txbroker.streams.version=0")
    p.add_argument("--require-coverage", action="store_true",
                   help="refuse to start if an advertised API version has no corpus frame; "
                        "fail if an advertised API got no frame")
    args = p.parse_args(argv)
    advertised = supported_versions()
    gaps = coverage_gaps(load(), advertised)
    if gaps and args.require_coverage:
        print("the corpus has no frame for these advertised (api key, version) pairs: "
              f"{gaps}; run python -m tests.fuzz.capture", file=sys.stderr)
        return 2
    result = fuzz(args.frames, args.seed, args.connections, args.chunk, args.timeout,
                  args.save_dir, not args.no_minimize, progress=True, data_dir=args.data_dir,
                  max_seconds=args.max_seconds,
                  overrides=dict(kv.split("=", 1) for kv in args.broker_config))
    print(f"\n{result.frames:,} frames in {result.seconds:,.1f}s: {result.rate:,.0f} frames/s; "
          f"outcomes {dict(result.outcomes)}; {result.canary_acked} canary values acked and "
          f"intact unless said below")
    lines, missing = coverage_table(result, advertised)
    print(f"seed {result.seed}; {len(advertised)} APIs served; per API key as sent (after "
          f"mutation; 'seeded': frames mutated from a corpus frame of that API):")
    print("\n".join("  " + line for line in lines))
    if gaps:
        print(f"corpus gaps (advertised, no seed frame): {gaps}")
    if missing:
        print(f"advertised APIs no frame was sent to: {missing}")
    print(f"findings: {len(result.findings)}")
    known = known_signatures()
    for f in result.findings:
        tracked = f" [known: {known[f.signature]}]" if f.signature in known else " [NEW]"
        print(f"  {f.signature}{tracked} (in {f.repeats} chunk(s))\n    {f.detail}\n"
              f"    {len(f.frames)} frame(s){' (minimized)' if f.minimized else ''}: "
              f"{f.labels[:1]} -> {f.saved_to}")
    if args.require_coverage and missing:
        return 1
    return 1 if any(f.signature not in known for f in result.findings) else 0


if __name__ == "__main__":
    sys.exit(main())
