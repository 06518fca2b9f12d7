"""Exactly-once consume-transform-produce with real clients (txn_worker.py processes):
the worker is SIGKILLed in the middle of a transaction (records produced, offsets sent
with send_offsets_to_transaction, no EndTxn); a new worker with the same
transactional.id fences and aborts it and finishes the job. Every input record
appears in the output exactly once for read_committed readers, and the group's
committed offsets end at the input's end. While the transaction is open, OffsetFetch
with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT, checked on the wire.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coordinator.group.coordinator import OFFSETS_TOPIC
from protocol.errors import ErrorCode

from .clients import Msg, produce
from .txn_util import (
    TXN_CONFIG,
    log_ends,
    offset_fetch,
    read_all,
    stable_ends,
    unique,
    wait_state,
)
from .wire_util import connect

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
PER_PARTITION = 20
UNSTABLE = ErrorCode.unstable_offset_commit.value


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


class Worker:
    """A txn_worker process; its output lines are collected by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.txn_worker", *args], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is not None and line.startswith(prefix):
                return line
            if line is None:
                raise AssertionError(f"worker never printed {prefix!r} (exit "
                                     f"{self.proc.poll()}):\n" + "\n".join(self.lines[-60:]))

    def committed_records(self) -> int:
        return sum(int(line.split()[2]) for line in self.lines if line.startswith("COMMITTED"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_consume_transform_produce_survives_killed_worker(txbroker, client):
    source, sink = unique("eos-in"), unique("eos-out")
    txbroker.create_topic(source, PARTITIONS)
    txbroker.create_topic(sink, PARTITIONS)
    group, tid = unique("eos-group"), unique(f"eos-{client}")
    inputs = {p: [b"v%d-%d" % (p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    produce("confluent", txbroker.bootstrap, source,
            [Msg(b"k%d" % i, v, partition=p) for p, vs in inputs.items()
             for i, v in enumerate(vs)])
    in_tps = [(source, p) for p in range(PARTITIONS)]
    out_tps = [(sink, p) for p in range(PARTITIONS)]
    args = [client, txbroker.bootstrap, source, sink, group, tid, "--batch", "7"]
    raw = connect(txbroker)
    workers: list[Worker] = []
    try:
        first = Worker(*args, "--pause-after", "2")
        workers.append(first)
        positions = json.loads(first.wait_for("PAUSED", 60).split(" ", 1)[1])
        info = wait_state(txbroker, tid, ["Ongoing"])
        assert any(t == OFFSETS_TOPIC for t, _p in info["partitions"]), info
        before = first.committed_records()
        assert before == 14  # two transactions of 7

        # KIP-447 between TxnOffsetCommit and EndTxn, on the wire (OffsetFetch v7).
        stable = offset_fetch(raw, group, in_tps, require_stable=True)
        for p in positions:
            assert stable[(source, int(p))][0] == UNSTABLE, stable
        loose = offset_fetch(raw, group, in_tps, require_stable=False)
        assert all(error == 0 for error, _o in loose.values()), loose
        assert sum(max(o, 0) for _e, o in loose.values()) == before  # the pending ones hidden
        # The open transaction's records are written but invisible to read_committed.
        visible = read_all("kafka-python", txbroker.bootstrap, stable_ends(txbroker, out_tps))
        assert sum(len(v) for v in visible.values()) == before
        everything = read_all("kafka-python", txbroker.bootstrap, log_ends(txbroker, out_tps),
                              read_committed=False)
        assert sum(len(v) for v in everything.values()) == before + 7

        first.kill()  # SIGKILL in the middle of the transaction
        second = Worker(*args)
        workers.append(second)
        second.wait_for("DONE", 60)
        assert second.proc.wait(10) == 0
    finally:
        for w in workers:
            w.kill()
    wait_state(txbroker, tid, ["CompleteCommit", "CompleteAbort", "Empty"])
    in_ends = log_ends(txbroker, in_tps)
    assert offset_fetch(raw, group, in_tps, require_stable=True) == {
        tp: (0, end) for tp, end in in_ends.items()}
    raw.close()
    out_ends = log_ends(txbroker, out_tps)
    expected = {(sink, p): [b"out:" + v for v in vs] for p, vs in inputs.items()}
    for reader in ("confluent", "aiokafka"):
        assert read_all(reader, txbroker.bootstrap, out_ends) == expected, reader
    # The killed transaction's records are in the log, aborted.
    raw_out = read_all("kafka-python", txbroker.bootstrap, out_ends, read_committed=False)
    assert sum(len(v) for v in raw_out.values()) == PARTITIONS * PER_PARTITION + 7
