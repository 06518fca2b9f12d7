"""What TLS and SASL cost: produce and read_committed consume over TLS against
PLAINTEXT, and SCRAM authentications per second.

    .venv/bin/python -m bench.security [--runs 3] [--messages 20000] [--out DIR] [--quick]

One broker process (``python -m txbroker serve``) with PLAINTEXT, SSL and SASL_SSL
listeners (throwaway certificates, SCRAM users; testing/security.py). Per run
and listener: confluent-kafka produces ``--messages`` 1 KiB values with acks=all
(linger.ms=5) and we count messages/s until the last delivery report; then a
read_committed consumer (a fresh group) reads them all from the beginning after they
were committed in transactions of 1000. SCRAM: new connections that authenticate with
SCRAM-SHA-256 and get an answer, from 4 client processes for ``--seconds`` each, on
SASL_PLAINTEXT and SASL_SSL, speaking the wire directly with protocol/scram.py (the
client keeps its PBKDF2 result, so the number is the broker's rate, not the client's
key stretching); and, for a real client's view, new confluent-kafka producers that
connect and fetch metadata over SASL_SSL, one after the other. Medians of ``--runs``.
Targets: TLS >= 0.6x PLAINTEXT for both; SCRAM >= 200 connections/s.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import ssl
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txbroker.protocol import scram
from txbroker.protocol.messages import build, decode_response, encode_request, request_module
from txbroker.testing import BrokerProcess

from . import report

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
TARGETS = {"tls_produce_ratio": 0.6, "tls_consume_ratio": 0.6, "scram_connections_per_s": 200.0}
USERS = {"bench": "bench-secret"}
VALUE = b"x" * 1024


def _client_conf(broker: BrokerProcess, listener: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"log_level": 2}
    if listener == "PLAINTEXT":
        conf["bootstrap.servers"] = broker.bootstrap_for("PLAINTEXT")
    else:
        conf.update(broker.client_config(listener, "bench"))
    return conf


def produce_rate(conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer({**conf, "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": n + 10})
    p.list_topics(topic, timeout=10)
    started = time.perf_counter()
    for _ in range(n):
        p.produce(topic, VALUE)
        p.poll(0)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - started)


def fill_committed(conf: dict[str, Any], topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({**conf, "transactional.id": f"bench-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    for start in range(0, n, 1000):
        p.begin_transaction()
        for _ in range(min(1000, n - start)):
            p.produce(topic, VALUE)
            p.poll(0)
        p.commit_transaction(60)


def consume_rate(conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Consumer

    c = Consumer({**conf, "group.id": f"g-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    started = None
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for msg in c.consume(1000, 1.0):
            if msg.error() is None:
                if started is None:
                    started = time.perf_counter()
                got += 1
    c.close()
    assert got >= n and started is not None, f"read {got} of {n}"
    return n / (time.perf_counter() - started)


# --- SCRAM connections per second (raw wire, several processes) -------------------------


def _request(sock, api_key: int, version: int, corr: int, message) -> Any:
    sock.sendall(encode_request(api_key, version, corr, "bench", message))
    head = _recv(sock, 4)
    body = _recv(sock, struct.unpack(">i", head)[0])
    return decode_response(api_key, version, body)[1]


def _recv(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def scram_worker(host: str, port: int, cafile: str | None, seconds: float, out) -> None:
    mech = scram.mechanism("SCRAM-SHA-256")
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    hs = request_module(17, 1)
    au = request_module(36, 2)
    salted_cache: dict[bytes, bytes] = {}
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock = socket.create_connection((host, port))
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        try:
            assert _request(sock, 17, 1, 1, build(hs.SaslHandshakeRequest, mechanism="SCRAM-SHA-256")).error_code == 0
            first = scram.ClientFirstMessage("bench", scram.generate_nonce())
            r = _request(sock, 36, 2, 2, build(au.SaslAuthenticateRequest, auth_bytes=first.to_bytes()))
            sf = scram.ServerFirstMessage.parse(r.auth_bytes)
            salted = salted_cache.get(sf.salt)
            if salted is None:
                salted = salted_cache[sf.salt] = scram.salted_password(mech, USERS["bench"], sf.salt, sf.iterations)
            final = scram.ClientFinalMessage(b"n,,", sf.nonce)
            auth = scram.auth_message(first.bare(), r.auth_bytes, final.without_proof())
            final = scram.ClientFinalMessage(b"n,,", sf.nonce, scram.client_proof(mech, salted, auth))
            r = _request(sock, 36, 2, 3, build(au.SaslAuthenticateRequest, auth_bytes=final.to_bytes()))
            assert r.error_code == 0
            done += 1
        finally:
            sock.close()
    out.put(done)


def scram_rate(broker: BrokerProcess, listener: str, seconds: float, workers: int = 4) -> float:
    host, port = broker.bootstrap_for(listener).rsplit(":", 1)
    cafile = broker.certs.ca_file if listener == "SASL_SSL" else None
    q: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=scram_worker, args=(host, int(port), cafile, seconds, q))
             for _ in range(workers)]
    for p in procs:
        p.start()
    total = sum(q.get(timeout=seconds + 60) for _ in procs)
    for p in procs:
        p.join(10)
    return total / seconds


def confluent_connections_rate(broker: BrokerProcess, seconds: float) -> float:
    from confluent_kafka import Producer

    conf = _client_conf(broker, "SASL_SSL")
    done = 0
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < deadline:
        Producer(conf).list_topics(timeout=10)
        done += 1
    return done / (time.monotonic() - started)


def run_once(args, run: int) -> dict[str, Any]:
    data = tempfile.mkdtemp(prefix="txbroker-bench-security-")
    broker = BrokerProcess(data + "/data", {"log.flush.interval.messages": "1"},
                           listeners=["PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"],
                           users=USERS, sasl_mechanisms=["SCRAM-SHA-256"])
    broker.start()
    try:
        result: dict[str, Any] = {"run": run}
        for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
            conf = _client_conf(broker, listener)
            topic = f"p-{listener}-{run}"
            report.wait_for_idle(5)
            result[f"produce_{listener}"] = produce_rate(conf, topic, args.messages)
            topic = f"c-{listener}-{run}"
            fill_committed(conf, topic, args.messages)
            report.wait_for_idle(5)
            result[f"consume_{listener}"] = consume_rate(conf, topic, args.messages)
        for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
            report.wait_for_idle(5)
            result[f"scram_{listener}"] = scram_rate(broker, listener, args.seconds)
        result["confluent_new_producers_SASL_SSL"] = confluent_connections_rate(broker, args.seconds)
        return result
    finally:
        broker.terminate()


def render(rep: dict[str, Any]) -> str:
    m = rep["median"]
    lines = [
        "# TLS and SASL cost (bench/security.py)", "",
        f"`{rep['command']}`", "",
        f"Machine: {rep['machine'].get('cpu_model', '?')}, {rep['machine'].get('logical_cores', '?')} logical cores "
        f"(load at start {rep['machine'].get('loadavg_start')}). "
        f"Medians of {rep['runs']} runs, {rep['messages']} messages of 1 KiB.", "",
        "| | PLAINTEXT | SSL | SASL_SSL (SCRAM-SHA-256) | SSL / PLAINTEXT | target |",
        "|---|---|---|---|---|---|",
    ]
    for kind, label in (("produce", "produce msgs/s (acks=all)"), ("consume", "read_committed consume msgs/s")):
        ratio = m[f"{kind}_SSL"] / m[f"{kind}_PLAINTEXT"]
        lines.append(f"| {label} | {report.fmt(m[f'{kind}_PLAINTEXT'], 0)} | {report.fmt(m[f'{kind}_SSL'], 0)} | "
                     f"{report.fmt(m[f'{kind}_SASL_SSL'], 0)} | {ratio:.2f} | >= {TARGETS['tls_produce_ratio']} |")
    lines += [
        "", "| SCRAM-SHA-256 authentications | per second | target |", "|---|---|---|",
        f"| raw wire, 4 processes, SASL_PLAINTEXT | {report.fmt(m['scram_SASL_PLAINTEXT'], 0)} | >= 200 |",
        f"| raw wire, 4 processes, SASL_SSL (incl. TLS handshake) | {report.fmt(m['scram_SASL_SSL'], 0)} | >= 200 |",
        f"| confluent-kafka, a new producer + metadata each, one at a time, SASL_SSL | "
        f"{report.fmt(m['confluent_new_producers_SASL_SSL'], 0)} | (client-bound) |", "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--seconds", type=float, default=5.0, help="per SCRAM measurement")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="1 run, 3000 messages, 2 s")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.messages, args.seconds = 1, 3000, 2.0
    report.stop_on_sigterm()
    runs = [run_once(args, i) for i in range(args.runs)]
    keys = [k for k in runs[0] if k != "run"]
    rep = {"machine": report.machine_info(), "command": report.command_line("bench.security", argv),
           "targets": TARGETS, "runs": args.runs, "messages": args.messages,
           "results": runs, "median": {k: report.median([r[k] for r in runs]) for k in keys}}
    report.write_report(args.out, "security-quick" if args.quick else "security", rep, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
