"""The broker process's start-up, and its first requests against later ones.

    .venv/bin/python -m bench.startup [--runs N] [--command "CMD ..."] [--requests N]

Each run starts ``txbroker serve --host 127.0.0.1 --port P --data-dir D`` (a fresh empty
data dir, a free port P) and times, from just before the process is spawned:

* **ready**: its "ready: listening" log line;
* **first_api_versions**: its first answered ApiVersions v3 request (the client connects
  again every millisecond until the port accepts); vs_kafka.py's ``startup`` phase times
  the "ready" line, which comes a millisecond or two before;
* **cpu_to_first_api_versions**: the CPU time the process used until then (less noisy
  than the wall clock on a shared machine);

then, on the same connection, the latency of the first request of each of a few APIs
(ApiVersions, Metadata, CreateTopics, Produce, Fetch: their schemas and handlers are
loaded on first use) right after start; of Metadata requests 60 ms apart in the next
two seconds (**sparse**: the broker imports schemas in the background while idle);
against the median of the same request sent ``--requests`` times once the broker has
been up for a while (**steady**). The command defaults to this environment's ``txbroker``
script; ``--command`` runs another (a plain virtualenv's, say). Prints medians and ranges;
``--json FILE`` keeps every run's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from txbroker.protocol.messages import encode_request

HOST = "127.0.0.1"
_SIZE = struct.Struct(">i")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _api_versions_frame(correlation_id: int) -> bytes:
    """ApiVersions v3, hand-encoded (request header v2, compact strings)."""
    client = b"bench"
    name, version = b"bench-startup", b"1"
    body = (struct.pack(">hhih", 18, 3, correlation_id, len(client)) + client + b"\x00"
            + bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00")
    return _SIZE.pack(len(body)) + body


class _Connection:
    """One client connection: a frame out, the response frame back."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.rfile = sock.makefile("rb")

    def exchange(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        head = self.rfile.read(4)
        if len(head) < 4:
            raise ConnectionError("connection closed by the broker")
        (size,) = _SIZE.unpack(head)
        return self.rfile.read(size)

    def timed(self, frame: bytes) -> float:
        began = time.perf_counter()
        self.exchange(frame)
        return time.perf_counter() - began

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


class _Requests:
    """The requests timed on first use, encoded once (kio, in this process)."""

    def __init__(self, topic: str) -> None:
        from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
        from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.produce.v9.request import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )
        from kio.static.primitive import i32, i32Timedelta, i64
        from txbroker.protocol.records import Record, build_batch

        self.topic = topic
        batch = build_batch([Record(key=None, value=b"x" * 100)])
        self.encoders: dict[str, tuple[int, int, object]] = {
            "metadata": (3, 12, MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)),
            "create_topics": (19, 7, CreateTopicsRequest(
                topics=(CreatableTopic(name=topic, num_partitions=1, replication_factor=-1,
                                       assignments=(), configs=()),),
                timeout=i32Timedelta.parse(timedelta(seconds=10)), validate_only=False)),
            "produce": (0, 9, ProduceRequest(
                transactional_id=None, acks=1, timeout=i32Timedelta.parse(timedelta(seconds=10)),
                topic_data=(TopicProduceData(name=topic, partition_data=(
                    PartitionProduceData(index=i32(0), records=batch),)),))),
            "fetch": (1, 12, FetchRequest(
                replica_id=i32(-1), max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1),
                max_bytes=i32(1 << 20), isolation_level=1, session_id=i32(0),
                session_epoch=i32(-1), topics=(FetchTopic(topic=topic, partitions=(
                    FetchPartition(partition=i32(0), current_leader_epoch=i32(-1),
                                   fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                                   log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),
                )),), forgotten_topics_data=(), rack_id="")),
        }

    def frame(self, name: str, correlation_id: int) -> bytes:
        if name == "api_versions":
            return _api_versions_frame(correlation_id)
        api_key, version, message = self.encoders[name]
        return encode_request(api_key, version, correlation_id, "bench", message)


FIRST_USE = ("api_versions", "metadata", "create_topics", "produce", "fetch")
REPEATED = ("api_versions", "metadata", "produce", "fetch")
SPARSE_GAP_S = 0.06


def _cpu_seconds(pid: int) -> float:
    """The CPU time of the process's threads so far (schedstat, in ns): less noisy than
    the wall clock on a loaded machine."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def one_run(command: list[str], requests: int, settle: float,
            sparse_requests: int = 30) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="txbroker-startup-")
    port = _free_port()
    ready = threading.Event()
    out: dict[str, float] = {}
    reqs = _Requests("startup-bench")
    began = time.monotonic()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as bench/brokers.py's brokers (why: there)
    proc = subprocess.Popen(
        [*command, "serve", "--host", HOST, "--port", str(port), "--data-dir", data_dir],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "ready: listening" in line and not ready.is_set():
                out["ready"] = time.monotonic() - began
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = began + 30
        while True:
            try:
                sock = socket.create_connection((HOST, port), timeout=10)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the broker did not listen:\n"
                                       + "".join(lines[-20:])) from None
                time.sleep(0.001)
        conn = _Connection(sock)
        try:
            conn.exchange(_api_versions_frame(1))
            out["first_api_versions"] = time.monotonic() - began
            out["cpu_to_first_api_versions"] = _cpu_seconds(proc.pid)
            for i, name in enumerate(FIRST_USE):
                out[f"first:{name}"] = conn.timed(reqs.frame(name, 10 + i))
            # Requests spaced past the broker's idle wait (its background schema import
            # runs between them): does it delay them?
            sparse = []
            for i in range(sparse_requests):
                time.sleep(SPARSE_GAP_S)
                sparse.append(conn.timed(reqs.frame("metadata", 50 + i)))
            out["sparse:metadata_median"] = statistics.median(sparse)
            out["sparse:metadata_p90"] = statistics.quantiles(sparse, n=10)[-1]
            out["sparse:metadata_max"] = max(sparse)
            time.sleep(settle)  # (back to back below: no idle moment for the preload)
            cid = 100
            for name in REPEATED:
                times = []
                for _ in range(requests):
                    cid += 1
                    times.append(conn.timed(reqs.frame(name, cid)))
                out[f"steady:{name}"] = statistics.median(times)
            ready.wait(5)
        finally:
            conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def _default_command() -> list[str]:
    script = Path(sys.executable).parent / "txbroker"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "txbroker"]


def summarize(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    keys = sorted({k for r in runs for k in r})
    summary = {}
    for key in keys:
        values = [r[key] for r in runs if key in r]
        summary[key] = {"median_ms": round(statistics.median(values) * 1000, 2),
                        "min_ms": round(min(values) * 1000, 2),
                        "max_ms": round(max(values) * 1000, 2), "n": len(values)}
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup",
                                description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--command", help="the txbroker command (default: this environment's)")
    p.add_argument("--requests", type=int, default=1000,
                   help="requests per API once settled (the steady-state median)")
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds between the first requests and the repeated ones")
    p.add_argument("--sparse", type=int, default=30, choices=range(2, 10_001), metavar="N",
                   help="Metadata requests 60 ms apart right after the first ones")
    p.add_argument("--warmup", type=int, default=1,
                   help="starts not counted first (the first one writes the bytecode caches "
                        "of modules edited since)")
    p.add_argument("--json", type=Path, help="write every run's figures here")
    opts = p.parse_args(argv)
    command = shlex.split(opts.command) if opts.command else _default_command()
    for _ in range(opts.warmup):
        one_run(command, 1, 0, 2)
    runs: list[dict[str, float]] = []
    for _ in range(opts.runs):
        runs.append(one_run(command, opts.requests, opts.settle, opts.sparse))
    summary = summarize(runs)
    print(f"{' '.join(command)} serve: {opts.runs} runs, load {os.getloadavg()[0]:.2f}")
    for key, s in summary.items():
        print(f"  {key:28s} median {s['median_ms']:9.2f} ms  "
              f"[{s['min_ms']:.2f} .. {s['max_ms']:.2f}]")
    if opts.json:
        opts.json.write_text(json.dumps({"command": command, "runs": runs, "summary": summary},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
