"""Hostile clients against a broker PROCESS (a native abort would take an in-process
broker and the test with it): frames that used to abort the process, null arrays,
fetch amplification, clients that never read, large frames, and a SIGTERM that a
non-reading client used to hold for the whole shutdown.timeout.ms (issue 14)."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from txbroker.protocol.messages import decode_response

from tests.helpers import BrokerProcess, RawClient
from tests.integration.wire_util import (
    FETCH,
    METADATA,
    PRODUCE,
    batch,
    fetch_request,
    frame,
    metadata_request,
    produce_request,
)
from tests.unit.protocol.test_bounds import ABORTING_FRAMES


def _sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _raw(proc: BrokerProcess, timeout: float = 10) -> RawClient:
    return RawClient(proc.host, proc.port, timeout=timeout)


def _closed(client: RawClient) -> bool:
    return client.recv_frame() is None


def _serving(proc: BrokerProcess, topic: str = "ok") -> None:
    """A normal client still produces with acks=all."""
    p = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all",
                  "message.timeout.ms": 10000})
    errors = []
    p.produce(topic, b"still-serving", on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(15) == 0 and not errors, errors


def _no_traceback(proc: BrokerProcess) -> None:
    text = proc.log_text()
    for needle in ("Traceback", "Task exception was never retrieved", "CancelledError"):
        assert needle not in text, text[-3000:]


@pytest.fixture
def hostile_broker(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"), {"auto.create.topics.enable": "true"})
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


def test_frames_that_aborted_the_process_close_the_connection(hostile_broker):
    for name, body in ABORTING_FRAMES.items():
        client = _raw(hostile_broker)
        client.send_frame(_sized(body))
        assert _closed(client), name
        assert hostile_broker.running, f"{name} killed the broker"
    _serving(hostile_broker)
    warnings = [line for line in hostile_broker.output if "WARNING" in line
                and "elements but only" in line]
    assert len(warnings) == len(ABORTING_FRAMES), hostile_broker.log_text()[-3000:]
    _no_traceback(hostile_broker)


def test_null_array_closes_the_connection_without_a_traceback(hostile_broker):
    client = _raw(hostile_broker)
    client.send_frame(_sized(struct.pack(">hhih", 15, 5, 1, -1) + b"\x00\x00\x00\x00"))
    assert _closed(client)
    _serving(hostile_broker)
    assert any("DescribeGroupsRequest.groups: count -1" in line and "WARNING" in line
               for line in hostile_broker.output)
    _no_traceback(hostile_broker)


def _fill(proc: BrokerProcess, topic: str, megabytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
    client = _raw(proc, timeout=30)
    half_mb = batch(8, value_size=64 * 1024)
    for i in range(2 * megabytes):
        client.send_frame(frame(PRODUCE, 9, i, produce_request({topic: {0: half_mb}})))
        body = client.recv_frame()
        assert body is not None
        _, response = decode_response(PRODUCE, 9, body)
        assert response.responses[0].partition_responses[0].error_code == 0
    client.sock.close()


def _fetch_records_sizes(body: bytes) -> list[tuple[str, int, int]]:
    _, response = decode_response(FETCH, 12, body)
    return [(t.topic, p.partition_index, len(p.records or b""))
            for t in response.responses for p in t.partitions]


def test_fetch_lists_a_partition_once_and_caps_the_response(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"), {"fetch.max.bytes": str(3 << 20)}).start()
    try:
        _fill(proc, "big", 8)
        client = _raw(proc, timeout=30)
        # One partition listed 40 times, every limit at 2^31-1.
        request = fetch_request({"big": {0: 0}}, partition_max_bytes=2**31 - 1)
        request = dataclasses.replace(request, topics=request.topics * 40)
        client.send_frame(frame(FETCH, 12, 1, request))
        body = client.recv_frame()
        assert body is not None
        sizes = _fetch_records_sizes(body)
        assert [(t, p) for t, p, _ in sizes] == [("big", 0)]
        assert 0 < sizes[0][2] <= 3 << 20  # fetch.max.bytes, not the 8 MB there
    finally:
        proc.kill()


def _peak_rss_while(pid: int, busy: threading.Thread, seconds: float,
                    at_least: float = 0) -> int:
    """Peak RSS of ``pid`` while ``busy`` runs (and for ``at_least`` seconds)."""
    process = psutil.Process(pid)
    peak = process.memory_info().rss
    started = time.monotonic()
    while time.monotonic() - started < seconds and \
            (busy.is_alive() or time.monotonic() - started < at_least):
        peak = max(peak, process.memory_info().rss)
        time.sleep(0.02)
    return max(peak, process.memory_info().rss)


def test_pipelined_fetches_never_read_do_not_grow_memory(tmp_path):
    """200 pipelined 8 MB fetches whose responses are never read: the broker stops
    reading that connection's requests instead of building 1.6 GB of responses."""
    proc = BrokerProcess(str(tmp_path / "data")).start()
    try:
        _fill(proc, "big", 8)
        rss_before = psutil.Process(proc.proc.pid).memory_info().rss
        request = frame(FETCH, 12, 1, fetch_request({"big": {0: 0}},
                                                    partition_max_bytes=2**31 - 1))
        sock = socket.create_connection((proc.host, proc.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(0.5)

        def pipeline() -> None:
            for _ in range(200):
                try:
                    sock.sendall(request)
                except (TimeoutError, OSError):
                    return  # the broker stopped reading: backpressure

        sender = threading.Thread(target=pipeline, daemon=True)
        sender.start()
        peak = _peak_rss_while(proc.proc.pid, sender, 8, at_least=4)
        assert peak - rss_before < 160 << 20, (rss_before, peak)
        _serving(proc)
        sock.close()
    finally:
        proc.kill()


def test_sigterm_does_not_wait_for_a_client_that_does_not_read(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"), {"shutdown.timeout.ms": "120000"}).start()
    try:
        # Topics, so that each unread Metadata answer is a few KB.
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic(f"t{i}", 1) for i in range(30)]).values():
            future.result(15)
        del admin
        sock = socket.create_connection((proc.host, proc.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(0.2)
        request = frame(METADATA, 12, 1, metadata_request(None))
        sent = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sent < 200_000:
            try:
                sock.sendall(request * 100)
                sent += 100
            except (TimeoutError, OSError):
                break  # the broker's reading stopped: its answers are unread
        assert sent >= 100
        print(f"{sent} requests sent before the broker stopped reading")
        started = time.monotonic()
        assert proc.terminate(timeout=60) == 0
        # Old code: the full shutdown.timeout.ms (120 s) waiting for the unread answers.
        assert time.monotonic() - started < 30
        assert "shutdown complete" in proc.log_text()
        _no_traceback(proc)
        sock.close()
    finally:
        proc.kill()


def test_large_frames_are_bounded_by_queued_max_request_bytes(tmp_path):
    """8 connections each send a 40 MB frame: at most queued.max.request.bytes of them
    is held at once (the others wait before their bodies are read)."""
    proc = BrokerProcess(str(tmp_path / "data"), {
        "socket.request.max.bytes": str(48 << 20),
        "queued.max.request.bytes": str(48 << 20),
    }).start()
    try:
        rss_before = psutil.Process(proc.proc.pid).memory_info().rss
        # A Metadata v1 header, then garbage: rejected once read whole.
        body = struct.pack(">hhih", METADATA, 1, 7, -1) + struct.pack(">i", 2**31 - 1) + \
            b"\x00" * (40 << 20)
        payload = _sized(body)
        closed = []

        def send_one() -> None:
            s = socket.create_connection((proc.host, proc.port), timeout=60)
            try:
                s.sendall(payload)
                closed.append(s.recv(16) == b"")
            except OSError:
                closed.append(True)
            finally:
                s.close()

        threads = [threading.Thread(target=send_one, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        waiter = threading.Thread(target=lambda: [t.join(60) for t in threads], daemon=True)
        waiter.start()
        peak = _peak_rss_while(proc.proc.pid, waiter, 60)
        waiter.join(60)
        assert len(closed) == 8 and all(closed)
        # Without the bound all eight are read at once: 320 MB and more.
        assert peak - rss_before < 200 << 20, (rss_before, peak)
        _serving(proc)
        _no_traceback(proc)
    finally:
        proc.kill()


def test_a_large_valid_frame_is_read_whole_and_appended(tmp_path):
    """Frames above 1 MiB take the chunked read path; their data lands intact."""
    proc = BrokerProcess(str(tmp_path / "data")).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("wide", 2)])["wide"].result(15)
        del admin
        batches = {p: batch(12, value_size=64 * 1024) for p in (0, 1)}  # ~770 KB each
        request = frame(PRODUCE, 9, 1, produce_request({"wide": batches}))
        assert len(request) > 3 << 19
        client = _raw(proc, timeout=30)
        client.send_frame(request)
        body = client.recv_frame()
        assert body is not None
        _, response = decode_response(PRODUCE, 9, body)
        assert [p.error_code for p in response.responses[0].partition_responses] == [0, 0]
        client.send_frame(frame(FETCH, 12, 2, fetch_request({"wide": {0: 0, 1: 0}},
                                                           partition_max_bytes=4 << 20)))
        fetched = client.recv_frame()
        assert fetched is not None
        _, fetch = decode_response(FETCH, 12, fetched)
        got = {p.partition_index: bytes(p.records) for p in fetch.responses[0].partitions}
        for p, data in batches.items():
            # The stored batch is the produced one but for its base offset (0 here).
            assert got[p] == data
    finally:
        proc.kill()
