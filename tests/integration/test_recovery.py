"""Restart after a crash: the transaction coordinator loads from its snapshots plus
the records after them, and ends up where a full replay would (docs/operations.md,
"Recovery after a crash")."""

from __future__ import annotations

import logging
import os
import re

import pytest
from txbroker.coordinator.internal_topic import TXN_TOPIC, partition_for
from txbroker.coordinator.transaction.snapshot import SNAPSHOT_FILE, read_snapshot
from txbroker.storage.durable_file import unsynced_entries

from .txn_util import TxnProducer, unique, wait_state

CLIENT_CONFIG = {"confluent": {"metadata.recovery.strategy": "none"}}
CLIENTS = ("confluent", "kafka-python")


def _snapshot_dir(txbroker, tid: str) -> str:
    partitions = txbroker.call(lambda b: b.logs.topics[TXN_TOPIC].partitions)
    return os.path.join(txbroker.config.data_dir, f"{TXN_TOPIC}-{partition_for(tid, partitions)}")


def _snapshot_ids(txbroker, tid: str) -> set[str]:
    snap = read_snapshot(_snapshot_dir(txbroker, tid))
    return set() if snap is None else {row[0] for row in snap[1]}


def _durable_snapshot_ids(txbroker, tid: str) -> set[str]:
    """_snapshot_ids once no snapshot of the partition is being written and the last
    one's rename is fsynced. A simulated power loss removes a snapshot renamed into
    place whose directory was not fsynced yet (the harsher outcome:
    storage/durable_file.py), and here a snapshot follows every record: the one of a
    transaction's last record could still be on its way after an earlier one showed
    the id (the crash fell into its window in about 1 run of 7)."""
    directory = _snapshot_dir(txbroker, tid)
    partitions = txbroker.call(lambda b: b.logs.topics[TXN_TOPIC].partitions)
    partition = partition_for(tid, partitions)
    if txbroker.call(lambda b: partition in b.transactions.snapshots._writing):
        return set()
    if SNAPSHOT_FILE in unsynced_entries(directory):
        return set()
    return _snapshot_ids(txbroker, tid)


def _loaded(txbroker) -> bool:
    return txbroker.call(lambda b: b.transactions.state.loaded)


@pytest.mark.parametrize("power_loss", [False, True], ids=["crash", "power-loss"])
def test_coordinator_loads_snapshots_after_a_crash(txbroker, monkeypatch, caplog, power_loss):
    monkeypatch.setattr("txbroker.coordinator.transaction.coordinator.SNAPSHOT_MIN_RECORDS", 1)
    topic = unique("snap")
    txbroker.create_topic(topic, 2)
    tids = {client: unique(f"snap-{client}") for client in CLIENTS}
    producers = {c: TxnProducer(c, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(c, {}))
                 for c, tid in tids.items()}
    try:
        for client, producer in producers.items():
            producer.init()
            producer.begin()
            producer.send(topic, client.encode(), partition=0)
            producer.commit()
        before = {tid: wait_state(txbroker, tid, ["CompleteCommit"]) for tid in tids.values()}
        # Snapshots follow once what they hold is fsynced (lazy completions: <= 1 s).
        for tid in tids.values():
            assert _wait(lambda t=tid: t in _durable_snapshot_ids(txbroker, t)), tid
        txbroker.crash(power_loss=power_loss)
        caplog.set_level(logging.INFO, logger="txbroker")
        txbroker.restart()
        assert _wait(lambda: _loaded(txbroker))
        for tid, info in before.items():
            after = wait_state(txbroker, tid, ["CompleteCommit"])
            assert (after["producer_id"], after["producer_epoch"]) == \
                (info["producer_id"], info["producer_epoch"])
        messages = [r.getMessage() for r in caplog.records]
        loaded = [m for m in messages if "transaction coordinator" in m and "loaded" in m]
        from_snapshots = re.search(r"\((\d+) from snapshots\)", loaded[-1])
        assert from_snapshots and int(from_snapshots.group(1)) >= len(tids), loaded
        assert not any("outside the log" in m or "unreadable" in m for m in messages)
        for client, producer in producers.items():  # they carry on
            producer.begin()
            producer.send(topic, b"after-" + client.encode(), partition=1)
            producer.commit()
        for tid in tids.values():
            wait_state(txbroker, tid, ["CompleteCommit"])
    finally:
        for producer in producers.values():
            producer.close()


def test_an_unusable_snapshot_means_a_full_replay(txbroker, caplog):
    """A snapshot that does not fit the log (or cannot be read) is ignored: the
    partition is replayed whole, as in a data directory from before snapshots."""
    tid = unique("snap-bad")
    producer = TxnProducer("kafka-python", txbroker.bootstrap, tid)
    try:
        producer.init()
        info = wait_state(txbroker, tid, ["Empty"])
    finally:
        producer.close()
    path = os.path.join(_snapshot_dir(txbroker, tid), SNAPSHOT_FILE)
    txbroker.stop()
    assert os.path.exists(path)  # written at the clean shutdown
    with open(path, "wb") as f:
        f.write(b"\x93not a snapshot")
    caplog.set_level(logging.WARNING, logger="txbroker")
    txbroker.start()
    assert _wait(lambda: _loaded(txbroker))
    after = wait_state(txbroker, tid, ["Empty"])
    assert after["producer_epoch"] == info["producer_epoch"]
    assert any("replaying the whole partition" in r.getMessage() for r in caplog.records)


def _wait(predicate, timeout: float = 10) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _keys_apart(txbroker, partitions: int) -> tuple[str, str, str]:
    """Two keys (transactional ids or groups) in different coordinator partitions: the
    one to hold loading, the one served (in a partition that loads before it: the
    partitions load in order); and a new one-partition topic."""
    slow = next(k for k in (unique("held") for _ in range(1000)) if partition_for(k, partitions))
    fast = next(k for k in (unique("served") for _ in range(1000))
                if partition_for(k, partitions) < partition_for(slow, partitions))
    topic = unique("held-topic")
    txbroker.create_topic(topic, 1)
    return slow, fast, topic


def test_ids_of_loaded_partitions_are_served_while_another_loads(txbroker, monkeypatch):
    """Per-partition coordinator readiness (issue 20): while one __transaction_state
    partition is still loading, its ids get COORDINATOR_LOAD_IN_PROGRESS and the ids of
    the partitions already loaded are served (a transaction commits), as Kafka serves
    each coordinator partition once it has loaded. The held partition is kept loading
    by the test until it lets go."""
    import asyncio
    import threading

    from txbroker.coordinator.transaction.coordinator import TransactionCoordinator

    from tests.helpers import RawClient

    from .txn_util import RawTxn

    partitions = txbroker.call(lambda b: b.transactions.config.state_log_partitions)
    slow, fast, topic = _keys_apart(txbroker, partitions)
    for tid in (slow, fast):
        with TxnProducer("confluent", txbroker.bootstrap, tid, **CLIENT_CONFIG["confluent"]) as p:
            p.init()
            p.begin()
            p.send(topic, tid.encode(), partition=0)
            p.commit()
    held_partition = partition_for(slow, partitions)
    release = threading.Event()
    recovered = TransactionCoordinator._recovered

    def held(self, p: int) -> None:
        if p != held_partition:
            return recovered(self, p)
        loop = asyncio.get_running_loop()

        def later() -> None:
            if release.is_set():
                recovered(self, p)
            else:
                loop.call_later(0.02, later)

        later()

    monkeypatch.setattr(TransactionCoordinator, "_recovered", held)
    txbroker.crash()
    txbroker.restart()
    client = RawClient(txbroker.host, txbroker.port)
    try:
        served = RawTxn(client, fast)
        assert _wait(lambda: served.init(expect_ok=False).error_code == 0)
        with TxnProducer("kafka-python", txbroker.bootstrap, fast) as p:
            p.init()
            p.begin()
            p.send(topic, b"while-loading", partition=0)
            p.commit()
        assert [RawTxn(client, slow).init(expect_ok=False).error_code for _ in range(3)] == [14] * 3
        assert not _loaded(txbroker)
        release.set()
        assert _wait(lambda: RawTxn(client, slow).init(expect_ok=False).error_code == 0)
        assert _loaded(txbroker)
    finally:
        release.set()
        client.close()


def test_groups_of_loaded_partitions_are_served_while_another_loads(txbroker, monkeypatch):
    """The group coordinator the same way: while one __consumer_offsets partition is
    still loading, OffsetFetch for its group answers COORDINATOR_LOAD_IN_PROGRESS and a
    group of a loaded partition gets its committed offsets."""
    import asyncio
    import threading

    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from txbroker.coordinator.group.coordinator import GroupCoordinator
    from txbroker.protocol.messages import build, request_module

    from tests.helpers import RawClient

    partitions = txbroker.call(lambda b: b.groups.config.offsets_topic_partitions)
    slow, fast, topic = _keys_apart(txbroker, partitions)
    for group, offset in ((slow, 3), (fast, 5)):
        consumer = KafkaConsumer(bootstrap_servers=txbroker.bootstrap, group_id=group,
                                 enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
        finally:
            consumer.close()
    held_partition = partition_for(slow, partitions)
    release = threading.Event()
    load_partition = GroupCoordinator._load_partition

    async def held(self, plog) -> int:
        while plog.partition == held_partition and not release.is_set():
            await asyncio.sleep(0.02)
        return await load_partition(self, plog)

    monkeypatch.setattr(GroupCoordinator, "_load_partition", held)
    txbroker.crash()
    txbroker.restart()
    m = request_module(9, 7)  # OffsetFetch v7

    def fetch(group: str) -> tuple[int, list[int]]:
        r = client.request(9, 7, build(
            m.OffsetFetchRequest, group_id=group, require_stable=False,
            topics=(build(m.OffsetFetchRequestTopic, name=topic, partition_indexes=(0,)),)))
        return int(r.error_code), [p.committed_offset for t in r.topics for p in t.partitions]

    client = RawClient(txbroker.host, txbroker.port)
    try:
        assert _wait(lambda: fetch(fast) == (0, [5]))
        assert [fetch(slow)[0] for _ in range(3)] == [14] * 3  # COORDINATOR_LOAD_IN_PROGRESS
        assert not txbroker.call(lambda b: b.groups.loaded)
        release.set()
        assert _wait(lambda: fetch(slow) == (0, [3]))
    finally:
        release.set()
        client.close()


def test_a_partition_asked_for_loads_next(txbroker, monkeypatch):
    """An InitProducerId for an id whose partition is still loading moves that
    partition to the front of the load and is answered once it is loaded (not
    COORDINATOR_LOAD_IN_PROGRESS), while the partitions before it in the load order
    still wait. Each partition's load is slowed down by the test so that the load
    takes seconds."""
    import asyncio

    from txbroker.coordinator.transaction.coordinator import TransactionCoordinator

    from tests.helpers import RawClient

    from .txn_util import RawTxn

    partitions = txbroker.call(lambda b: b.transactions.config.state_log_partitions)
    tid = next(t for t in (unique("last") for _ in range(1000))
               if partition_for(t, partitions) == partitions - 1)
    with TxnProducer("confluent", txbroker.bootstrap, tid, **CLIENT_CONFIG["confluent"]) as p:
        p.init()
    load_snapshot = TransactionCoordinator._load_snapshot

    async def slow(self, plog, view) -> int:
        await asyncio.sleep(0.1)  # 0.1 s a partition
        return await load_snapshot(self, plog, view)

    monkeypatch.setattr(TransactionCoordinator, "_load_snapshot", slow)
    txbroker.crash()
    txbroker.restart()
    client = RawClient(txbroker.host, txbroker.port)
    try:
        assert RawTxn(client, tid).init(expect_ok=False).error_code == 0
        assert not _loaded(txbroker)  # the partitions before it in order: not yet
    finally:
        client.close()
