"""Hostile clients against txbroker: what each costs the broker and the others.

    .venv/bin/python -m bench.abuse [--scenarios a,b] [--out DIR] [--quick]

Every scenario starts a fresh broker (defaults, fresh temporary data dir, loopback)
and, while the abuse runs, a normal client in its own process: confluent-kafka,
acks=all, 1 KiB values, one message at a time, each awaited. Reported per scenario:
the broker's peak RSS (psutil, every 50 ms), the normal client's produce latency
p50/p99 and errors, whether the broker survived (alive and still serving acks=all
at the end), and what the abusive requests got back. Every loop is bounded in count
and in time. Targets: peak RSS <= 256 MB, normal p99 <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from txbroker.protocol.messages import (
    build,
    decode_response,
    encode_request,
    request_module,
)
from txbroker.protocol.records import Record, build_batch, compute_crc

from . import report
from .brokers import RssSampler, TxBroker

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
TARGETS = {"peak_rss_mb": 256.0, "normal_p99_ms": 50.0}
NORMAL_TOPIC = "normal"
HOST = "127.0.0.1"


# --- the normal client (own process) ---------------------------------------------------

def normal_client_main(bootstrap: str, max_seconds: float = 900) -> None:
    """Produce 1 KiB values with acks=all one at a time until stdin says stop (or closes);
    print one JSON line: latencies summary and errors."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 10000, "log_level": 2})
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    latencies: list[float] = []
    errors: list[str] = []
    value = b"n" * 1024
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline and not sel.select(0):
        done: list = []
        t0 = time.perf_counter()
        p.produce(NORMAL_TOPIC, value, on_delivery=lambda err, _m, done=done: done.append(err))
        while not done and time.perf_counter() - t0 < 12:
            p.poll(0.05)
        # A failed send counts with the time it took to fail: what the client waited.
        latencies.append((time.perf_counter() - t0) * 1000)
        if not done:
            errors.append("no delivery report in 12 s")
        elif done[0] is not None:
            errors.append(str(done[0]))
    latencies.sort()

    def pct(q: float) -> float | None:
        return round(latencies[min(int(q * len(latencies)), len(latencies) - 1)], 2) \
            if latencies else None

    print(json.dumps({"sent": len(latencies), "acked": len(latencies) - len(errors), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
                      "max_ms": round(latencies[-1], 2) if latencies else None,
                      "errors": len(errors), "first_errors": sorted(set(errors))[:3]}),
          flush=True)


class NormalClient:
    def __init__(self, bootstrap: str) -> None:
        code = f"from bench.abuse import normal_client_main; normal_client_main({bootstrap!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
        self.result: dict[str, Any] | None = None

    def stop(self) -> dict[str, Any]:
        """Stop producing; the latency summary (stopping twice returns the first one)."""
        if self.result is not None:
            return self.result
        try:
            out, _ = self.proc.communicate("stop\n", timeout=30)
            self.result = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as e:
            self.proc.kill()
            self.proc.wait(5)
            self.result = {"acked": 0, "errors": 1, "first_errors": [f"normal client: {e!r}"]}
        return self.result


# --- raw wire helpers --------------------------------------------------------------------

class Raw:
    """A blocking connection sending kio requests; every read has a timeout."""

    def __init__(self, port: int, timeout: float = 30) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.cid = 0

    def send(self, api_key: int, version: int, message: Any) -> None:
        self.cid += 1
        self.sock.sendall(encode_request(api_key, version, self.cid, "abuse", message))

    def recv(self, api_key: int, version: int) -> tuple[Any, int] | None:
        """(response, frame size) or None if the broker closed the connection."""
        head = self._exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        body = self._exact(size)
        if body is None:
            return None
        return decode_response(api_key, version, body)[1], size

    def drain_size(self) -> int | None:
        """Read one response, keep only its size (a huge one is not held in memory)."""
        head = self._exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        left = size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                return None
            left -= len(chunk)
        return size

    def _exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionError, TimeoutError):
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def create_topics(port: int, topics: dict[str, int], timeout_s: float = 60) -> list[int]:
    """CreateTopics v4; the error codes (or [-1] if no answer in time)."""
    m = request_module(19, 4)
    req = m.CreateTopicsRequest(topics=tuple(
        m.CreatableTopic(name=t, num_partitions=n, replication_factor=1, assignments=(),
                         configs=()) for t, n in topics.items()),
        timeout=_ms(int(timeout_s * 1000)), validate_only=False)
    c = Raw(port, timeout_s)
    try:
        c.send(19, 4, req)
        got = c.recv(19, 4)
        return [-1] if got is None else [int(t.error_code) for t in got[0].topics]
    finally:
        c.close()


def produce_batch(port: int, topic: str, batch: bytes) -> int | None:
    m = request_module(0, 7)
    req = m.ProduceRequest(transactional_id=None, acks=-1, timeout=_ms(10000), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=0, records=batch),)),))
    c = Raw(port)
    try:
        c.send(0, 7, req)
        got = c.recv(0, 7)
        return None if got is None else int(got[0].responses[0].partition_responses[0].error_code)
    finally:
        c.close()


def log_end_offset(port: int, topic: str) -> int | None:
    m = request_module(2, 5)
    req = build(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(
        m.ListOffsetsTopic(name=topic, partitions=(
            build(m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                  timestamp=-1),)),))
    c = Raw(port)
    try:
        c.send(2, 5, req)
        got = c.recv(2, 5)
        return None if got is None else int(got[0].topics[0].partitions[0].offset)
    finally:
        c.close()


def fetch_request(topic: str, partitions: Sequence[int], max_bytes: int, version: int = 11):
    m = request_module(1, version)
    return build(m.FetchRequest, replica_id=-1, max_wait=_ms(0), min_bytes=1,
                 max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                 topics=(m.FetchTopic(topic=topic, partitions=tuple(
                     build(m.FetchPartition, partition=p, current_leader_epoch=-1,
                           fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=max_bytes) for p in partitions)),),
                 forgotten_topics_data=(), rack_id="")


def fill(bootstrap: str, topic: str, megabytes: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                  "batch.size": 1 << 20, "log_level": 2})
    value = os.urandom(1024)  # incompressible, and nothing compresses it anyway
    for _ in range(megabytes * 1024):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


# --- the scenarios -----------------------------------------------------------------------
# Each gets the broker (already serving, topic "normal" created) and returns what the
# abusive requests got; the normal client runs for the whole call.

def fetch_amplification(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    mb = 5 if quick else 30
    create_topics(broker.port, {"big": 1})
    fill(broker.bootstrap, "big", mb)
    out: dict[str, Any] = {"partition_mb": mb}
    c = Raw(broker.port, 60)
    try:
        t0 = time.monotonic()
        c.send(1, 11, fetch_request("big", [0] * 40, 2**31 - 1))
        size = c.drain_size()
        out["one_fetch_40x_response_mb"] = None if size is None else round(size / 1e6, 1)
        out["one_fetch_40x_s"] = round(time.monotonic() - t0, 2)
    finally:
        c.close()
    # 200 pipelined fetches whose responses are never read, held for a while.
    c = Raw(broker.port, 60)
    try:
        req = encode_request(1, 11, 1, "abuse", fetch_request("big", [0], 2**31 - 1))
        sent = 0
        c.sock.settimeout(5)
        t_end = time.monotonic() + 30
        try:
            for _ in range(200):
                if time.monotonic() > t_end:
                    break
                c.sock.sendall(req)
                sent += 1
        except (TimeoutError, OSError):
            pass  # the broker stopped reading us: that is the backpressure wanted
        out["pipelined_unread_fetches_sent"] = sent
        time.sleep(10)
    finally:
        c.close()
    return out


def _create_partitions(port: int, topic: str, count: int) -> dict[str, Any]:
    m = request_module(37, 1)
    req = m.CreatePartitionsRequest(topics=(m.CreatePartitionsTopic(
        name=topic, count=count, assignments=None),), timeout=_ms(60000), validate_only=False)
    c = Raw(port, 90)
    t0 = time.monotonic()
    try:
        c.send(37, 1, req)
        got = c.recv(37, 1)
        code = None if got is None else int(got[0].results[0].error_code)
    finally:
        c.close()
    return {"error_code": code, "seconds": round(time.monotonic() - t0, 1)}


def create_partitions_storm(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    create_topics(broker.port, {"storm": 1})
    return {"create_partitions_100000": _create_partitions(broker.port, "storm", 100_000)}


def create_topic_100k_partitions(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    t0 = time.monotonic()
    codes = create_topics(broker.port, {"wide": 100_000}, 90)
    return {"error_codes": sorted(set(codes)), "seconds": round(time.monotonic() - t0, 1)}


def create_10k_topics(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    t0 = time.monotonic()
    codes = create_topics(broker.port, {f"many-{i}": 1 for i in range(10_000)}, 90)
    counts: dict[int, int] = {}
    for code in codes:
        counts[code] = counts.get(code, 0) + 1
    return {"error_code_counts": counts, "seconds": round(time.monotonic() - t0, 1)}


def batch_header_lies(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    create_topics(broker.port, {"lies": 1})
    before = log_end_offset(broker.port, "lies")
    codes = []
    for claimed in (5_000_000, 2**31 - 1) * 10:
        buf = bytearray(build_batch([Record(key=None, value=b"x" * 100)]))
        struct.pack_into(">i", buf, 23, claimed - 1)   # lastOffsetDelta
        struct.pack_into(">i", buf, 57, claimed)       # recordsCount
        struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
        codes.append(produce_batch(broker.port, "lies", bytes(buf)))
    after = log_end_offset(broker.port, "lies")
    return {"produce_error_codes": sorted({-1 if c is None else c for c in codes}),
            "log_end_offset_before": before, "log_end_offset_after": after,
            # Handled: every lying batch refused, nothing appended.
            "handled": 0 not in codes and after == before}


def large_frames(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    declared = 100_000_000
    per_conn = 20_000_000 if quick else declared - 1  # never the last byte
    chunk = b"\x00" * (1 << 20)

    async def one() -> int:
        try:
            _r, w = await asyncio.open_connection(HOST, broker.port)
        except OSError:
            return 0
        sent = 0
        try:
            w.write(struct.pack(">i", declared))
            t_end = time.monotonic() + 40
            while sent < per_conn and time.monotonic() < t_end:
                n = min(len(chunk), per_conn - sent)
                w.write(chunk[:n])
                await asyncio.wait_for(w.drain(), 10)
                sent += n
                await asyncio.sleep(0.02)  # slowly: about 50 MB/s per connection at best
            await asyncio.sleep(3)
        except (OSError, TimeoutError):
            pass
        finally:
            w.close()
        return sent

    async def all_of_them() -> list[int]:
        return await asyncio.gather(*(one() for _ in range(8)))

    sent = asyncio.run(all_of_them())
    time.sleep(3)
    import psutil

    return {"connections": 8, "declared_mb": declared / 1e6,
            "sent_mb": [round(s / 1e6) for s in sent],
            "rss_mb_after_close": round(psutil.Process(broker.pid).memory_info().rss / 1e6, 1)}


def pipeline_then_sigterm(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    n = 20_000 if quick else 200_000
    m = request_module(3, 1)
    req = encode_request(3, 1, 1, "abuse", m.MetadataRequest(topics=()))
    c = Raw(broker.port, 5)
    sent = 0
    t_end = time.monotonic() + 30
    try:
        for i in range(0, n, 1000):
            if time.monotonic() > t_end:
                break
            c.sock.sendall(req * min(1000, n - i))
            sent += min(1000, n - i)
    except (TimeoutError, OSError):
        pass
    time.sleep(3)
    normal.stop()  # its latency while the pipeline sits unread; SIGTERM is next
    assert broker.proc is not None
    t0 = time.monotonic()
    broker.proc.send_signal(15)
    try:
        rc = broker.proc.wait(60)
    except subprocess.TimeoutExpired:
        rc = None
    c.close()
    took = time.monotonic() - t0
    return {"requests_sent_unread": sent, "sigterm_exit_code": rc,
            "sigterm_to_exit_s": round(took, 2) if rc is not None else ">60",
            # Handled: a client that does not read is not waited for (not 30 s).
            "handled": rc == 0 and took < 5}


def fuzzer(broker: TxBroker, quick: bool, normal: NormalClient) -> dict[str, Any]:
    from tests.fuzz.corpus import load
    from tests.fuzz.frames import send_frames
    from tests.fuzz.mutate import mutated

    corpus = load()
    frames = 5_000 if quick else 20_000
    outcomes: dict[str, int] = {}
    t0 = time.monotonic()
    for start in range(0, frames, 2000):
        if time.monotonic() - t0 > 120:
            break
        batch = [mutated(corpus, 7, i)[0] for i in range(start, min(start + 2000, frames))]
        for k, v in asyncio.run(send_frames(broker.port, batch, 8, 1.0)).items():
            outcomes[k] = outcomes.get(k, 0) + v
    sent = sum(outcomes.values())
    elapsed = time.monotonic() - t0
    return {"frames": sent, "frames_per_s": round(sent / elapsed), "outcomes": outcomes,
            "bad_log_lines": sum(1 for line in broker.output
                                 if "Traceback" in line or " ERROR " in line)}


SCENARIOS: dict[str, Callable[[TxBroker, bool, NormalClient], dict[str, Any]]] = {
    "fetch-amplification": fetch_amplification,
    "create-partitions-100k": create_partitions_storm,
    "create-topic-100k-partitions": create_topic_100k_partitions,
    "create-10k-topics": create_10k_topics,
    "batch-header-lies": batch_header_lies,
    "large-frames": large_frames,
    "pipeline-200k-then-sigterm": pipeline_then_sigterm,
    "fuzzer": fuzzer,
}


def still_serving(bootstrap: str) -> bool:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10000,
                  "log_level": 2})
    done: list = []
    p.produce(NORMAL_TOPIC, b"after", on_delivery=lambda err, _m, done=done: done.append(err))
    p.flush(12)
    return bool(done) and done[0] is None


def run_scenario(name: str, quick: bool) -> dict[str, Any]:
    broker = TxBroker()
    out: dict[str, Any] = {"scenario": name}
    sampler = None
    try:
        broker.start()
        sampler = RssSampler(broker.pid).start()
        create_topics(broker.port, {NORMAL_TOPIC: 1})
        normal = NormalClient(broker.bootstrap)
        time.sleep(1)  # the normal client is connected and producing before the abuse
        t0 = time.monotonic()
        try:
            out["abuse"] = SCENARIOS[name](broker, quick, normal)
        except Exception as e:  # noqa: BLE001 - a scenario's failure is a result
            out["abuse"] = {"failed": f"{type(e).__name__}: {e}"}
        out["seconds"] = round(time.monotonic() - t0, 1)
        out["normal"] = normal.stop()
        alive = broker.proc is not None and broker.proc.poll() is None
        sigterm = name == "pipeline-200k-then-sigterm"
        out["survived"] = (alive and still_serving(broker.bootstrap)) if not sigterm else \
            out["abuse"].get("sigterm_exit_code") == 0
        out["log_errors"] = [line.strip()[:200] for line in broker.output
                             if " ERROR " in line or "Traceback" in line][:3]
    finally:
        if sampler is not None:
            sampler.stop()
            out["peak_rss_mb"] = round(sampler.peak_rss / 1e6, 1)
        broker.stop(30)
    print(json.dumps(out), flush=True)
    return out


def render(rep: dict[str, Any]) -> str:
    lines = ["# Abuse benchmark", "",
             f"- date: {rep['machine']['date']}", f"- command: `{rep['command']}`",
             f"- txbroker {rep['machine']['txbroker_commit']}; "
             f"{rep['machine']['logical_cores']} cores; load at start "
             f"{rep['machine']['loadavg_start']}",
             "- fresh broker (defaults) per scenario; normal client: confluent-kafka acks=all, "
             "1 KiB values, one at a time, in its own process during the abuse",
             f"- targets: peak RSS <= {TARGETS['peak_rss_mb']:.0f} MB, normal p99 <= "
             f"{TARGETS['normal_p99_ms']:.0f} ms", "",
             "- normal latencies include failed sends (the time until the client gave up); "
             "targets met = RSS and p99 targets, no normal-client error, survived, no ERROR or "
             "traceback in the broker log, and the abuse handled (where the scenario can tell)",
             "",
             "| scenario | survived | peak RSS MB | normal p50 / p99 / max ms | normal acked / "
             "errors | targets met | what the abuse got |",
             "|---|---|---:|---:|---:|---|---|"]
    for r in rep["results"]:
        n = r.get("normal", {})
        rss, p99 = r.get("peak_rss_mb"), n.get("p99_ms")
        met = rss is not None and rss <= TARGETS["peak_rss_mb"] and p99 is not None \
            and p99 <= TARGETS["normal_p99_ms"] and n.get("errors", 1) == 0 \
            and r.get("survived") and not r.get("log_errors") \
            and r.get("abuse", {}).get("handled", True)
        abuse = json.dumps(r.get("abuse", {}))[:300].replace("|", "/")
        lines.append(f"| {r['scenario']} | {'yes' if r.get('survived') else '**no**'} | "
                     f"{report.fmt(rss)} | {n.get('p50_ms')} / {p99} / {n.get('max_ms')} | "
                     f"{n.get('acked')} / {n.get('errors')} | {'yes' if met else '**no**'} | "
                     f"`{abuse}` |")
    errs = [(r["scenario"], r["log_errors"]) for r in rep["results"] if r.get("log_errors")]
    if errs:
        lines += ["", "## ERROR lines / tracebacks in the broker log (first 3)", ""]
        for name, es in errs:
            lines += [f"- {name}:"] + [f"  - `{e}`" for e in es]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="smaller volumes (a smoke run)")
    args = p.parse_args(argv)
    report.stop_on_sigterm()
    machine = report.machine_info()
    results = [run_scenario(name, args.quick) for name in args.scenarios.split(",")]
    rep = {"machine": machine, "command": report.command_line("bench.abuse", argv),
           "targets": TARGETS, "quick": args.quick, "results": results}
    report.write_report(args.out, "abuse-quick" if args.quick else "abuse", rep, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
