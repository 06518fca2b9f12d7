"""Kafka Streams exactly_once_v2 on txbroker and on Apache Kafka: the payments validator
as a Streams topology (tests/jvm/PaymentsStreams.java: validate, re-key by account
through a repartition topic, sum per account in a RocksDB store with a changelog) is
SIGKILLed mid-stream and restarted with the same application.id and state directory.
read_committed readers then see every payment exactly once in the validated or
rejected topic, one balance update per valid payment with the right final sums, and
the store's changelog ends at those sums: the same on both brokers."""

from __future__ import annotations

import os
import queue
import struct
import subprocess
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from tests.integration.clients import Msg, produce
from tests.integration.txn_util import Reader, list_offsets, unique

from .jvm import classpath

PAYMENTS = 600
ACCOUNTS = 6
PARTITIONS = 2


def payment(i: int) -> tuple[str, str]:
    """(payment id, "account,amount"); every tenth is invalid (no amount, an unknown
    account or an amount of 0)."""
    account = f"acct-{i % ACCOUNTS}"
    if i % 10 == 9:
        return f"p{i}", (f"{account},0", f"nobody-{i},5", f"{account},x")[i // 10 % 3]
    return f"p{i}", f"{account},{1 + i % 7}"


class StreamsInstance:
    """One PaymentsStreams JVM; its output lines collected by a thread."""

    def __init__(self, classes: Path, bootstrap: str, app_id: str, prefix: str,
                 state_dir: Path, delay_ms: int, group_protocol: str = "classic",
                 application_server: str | None = None) -> None:
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath(classes),
             "PaymentsStreams", bootstrap, app_id, prefix, str(state_dir), str(delay_ms),
             group_protocol, *([application_server] if application_server else [])],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._states: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("STATE "):
                self._states.put(line.split()[1])

    def tail(self) -> str:
        return "\n".join(self.lines[-40:])

    def wait_state(self, state: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self._states.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                got = None
            if got == state:
                return
            if got == "ERROR" or time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"Streams never reached {state}:\n{self.tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no close(), no commit, no leave-group
        self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def committed(broker, topic: str, partitions: int) -> int:
    """Records up to the last stable offsets of ``topic`` (markers included)."""
    client = broker.raw()
    try:
        return sum(list_offsets(client, (topic, p), read_committed=True)
                   for p in range(partitions))
    finally:
        client.close()


def read_committed(broker, topic: str, partitions: int):
    """Every record a read_committed reader gets up to the log ends, once the last
    stable offsets reached them."""
    tps = [(topic, p) for p in range(partitions)]
    client = broker.raw()
    deadline = time.monotonic() + 30
    try:
        while True:
            ends = {tp: list_offsets(client, tp, read_committed=False) for tp in tps}
            stable = {tp: list_offsets(client, tp, read_committed=True) for tp in tps}
            if ends == stable:
                break
            assert time.monotonic() < deadline, f"{topic}: open transactions {ends} {stable}"
            time.sleep(0.2)
    finally:
        client.close()
    with Reader("confluent", broker.bootstrap, tps) as reader:
        return reader.read_until(ends, timeout=30)


def setup_payments(broker, prefix: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The topics and the payments; returns (valid payments, rejected payment ids)."""
    for name, partitions in (("payments", PARTITIONS), ("validated", PARTITIONS),
                             ("rejected", 1), ("balances", PARTITIONS)):
        broker.create_topic(f"{prefix}-{name}", partitions)
    inputs = [payment(i) for i in range(PAYMENTS)]
    produce("confluent", broker.bootstrap, f"{prefix}-payments",
            [Msg(k.encode(), v.encode(), partition=i % PARTITIONS)
             for i, (k, v) in enumerate(inputs)])
    valid = [(k, v) for k, v in inputs if v.split(",")[1].isdigit() and int(v.split(",")[1]) > 0
             and v.startswith("acct-")]
    return valid, [k for k, v in inputs if (k, v) not in valid]


def wait_committed(broker, topic: str, at_least: int, running: list[StreamsInstance],
                   timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while committed(broker, topic, PARTITIONS) < at_least:
        assert time.monotonic() < deadline and all(i.proc.poll() is None for i in running), \
            "\n".join(i.tail() for i in running)
        time.sleep(0.1)


def read_outputs(broker, prefix: str, app_id: str, valid: list, running: list[StreamsInstance]
                 ) -> dict[str, list]:
    """The read_committed outputs once every valid payment's balance is in."""
    deadline = time.monotonic() + 120
    while True:
        got = read_committed(broker, f"{prefix}-validated", PARTITIONS)
        if len(got) >= len(valid):
            break
        assert time.monotonic() < deadline and all(i.proc.poll() is None for i in running), \
            "\n".join(i.tail() for i in running)
        time.sleep(0.5)
    # Balances follow the repartition topic: wait until every payment's update is in.
    deadline = time.monotonic() + 60
    while len(balances := read_committed(broker, f"{prefix}-balances", PARTITIONS)) \
            < len(valid):
        assert time.monotonic() < deadline, (len(balances), [i.tail() for i in running])
        time.sleep(0.5)
    return {"validated": got, "balances": balances,
            "changelog": read_committed(broker, f"{app_id}-balances-changelog", PARTITIONS),
            "rejected": read_committed(broker, f"{prefix}-rejected", 1)}


def assert_exactly_once(out: dict[str, list], valid: list, rejected: list[str]) -> None:
    # Every valid payment exactly once, every invalid one exactly once.
    assert Counter(r.key.decode() for r in out["validated"]) == Counter(k for k, _v in valid)
    assert sorted(r.key.decode() for r in out["rejected"]) == sorted(rejected)
    # One balance per valid payment, rising per account, ending at the account's sum.
    totals: dict[str, int] = defaultdict(int)
    counts: Counter = Counter()
    for _k, v in valid:
        account, amount = v.split(",")
        totals[account] += int(amount)
        counts[account] += 1
    updates: dict[str, list[int]] = defaultdict(list)
    for r in sorted(out["balances"], key=lambda r: (r.partition, r.offset)):
        updates[r.key.decode()].append(int(r.value))
    assert {a: len(u) for a, u in updates.items()} == dict(counts)
    assert {a: u[-1] for a, u in updates.items()} == dict(totals)
    assert all(u == sorted(set(u)) for u in updates.values()), updates
    # The store's changelog ends at the same sums (Long serde: 8 bytes, big-endian).
    last: dict[str, int] = {}
    for r in sorted(out["changelog"], key=lambda r: (r.partition, r.offset)):
        last[r.key.decode()] = struct.unpack(">q", r.value)[0]
    assert last == dict(totals)


def test_streams_exactly_once_v2_survives_a_killed_instance(broker, jvm_classes, tmp_path):
    prefix = unique("streams")
    app_id = f"{prefix}-app"
    valid, rejected = setup_payments(broker, prefix)
    state_dir = tmp_path / "state"

    first = StreamsInstance(jvm_classes, broker.bootstrap, app_id, prefix, state_dir, 15)
    second = None
    try:
        first.wait_state("RUNNING", 90)
        wait_committed(broker, f"{prefix}-validated", 100, [first])
        first.kill()  # mid-stream: committed transactions behind it, one open
        assert committed(broker, f"{prefix}-validated", PARTITIONS) < len(valid), \
            "the first instance finished before it was killed"

        second = StreamsInstance(jvm_classes, broker.bootstrap, app_id, prefix, state_dir, 0)
        second.wait_state("RUNNING", 90)
        out = read_outputs(broker, prefix, app_id, valid, [second])
    finally:
        first.kill()
        if second is not None:
            second.terminate()
    assert_exactly_once(out, valid, rejected)
    assert os.path.isdir(state_dir)
