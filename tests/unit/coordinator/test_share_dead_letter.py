"""Dead-letter topics of share groups (KIP-1191): the ARCHIVING transitions of
``partition.py``, the headers and topic checks of ``dead_letter.py`` (Kafka 4.4's
ShareGroupDLQStateManager strings), and the share coordinator writing the records with
the group config lookup injected (no broker)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from txbroker.coordinator.share.coordinator import (
    ShareCoordinator,
    ShareCoordinatorConfig,
    _dead_letter_ranges,
)
from txbroker.coordinator.share.dead_letter import (
    EXCEEDED,
    REJECTED,
    DeadLetterRange,
    DeadLetterSettings,
    DeadLetterWriter,
    dead_letter_headers,
    dead_letter_topic_problem,
)
from txbroker.coordinator.share.partition import SharePartition
from txbroker.coordinator.share.results import (
    AcknowledgementBatch,
    FetchedBatch,
    SharePartitionConfig,
)
from txbroker.coordinator.share.state import (
    AcknowledgeType,
    PersistedShareState,
    RecordState,
    StateBatch,
)
from txbroker.protocol.records import Record, build_batch, decode_records, iter_batches, read_header
from txbroker.storage.manager import LogManager

LOCK = 1000
REJECT, RELEASE, GAP = AcknowledgeType.REJECT, AcknowledgeType.RELEASE, AcknowledgeType.GAP


def _acquired(limit: int = 5) -> SharePartition:
    """Offsets 0-9 in two batches, acquired by m1."""
    cfg = SharePartitionConfig(record_lock_duration_ms=LOCK, delivery_count_limit=limit)
    p, _ = SharePartition.initialize(cfg, 0)
    r = p.acquire("m1", [FetchedBatch(0, 4), FetchedBatch(5, 9)], fetch_offset=0, now_ms=0,
                  max_records=100)
    assert r.count == 10
    return p


def _ack(p: SharePartition, *batches: tuple[int, int, int], dead_letter: bool = True):
    return p.acknowledge("m1", [AcknowledgementBatch(a, b, (t,)) for a, b, t in batches],
                         now_ms=0, dead_letter=dead_letter)


def _states(write) -> list[tuple[int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state) for b in write.state_batches]


def test_reject_with_a_dead_letter_topic_is_archiving_until_finished() -> None:
    p = _acquired()
    res = _ack(p, (0, 1, REJECT), (2, 4, AcknowledgeType.ACCEPT))
    assert res.error_code == ErrorCode.none
    assert _states(res.write) == [(0, 1, 3), (2, 4, 2)]  # ARCHIVING is persisted (3)
    assert p.start_offset == 0  # held back by the records still to dead-letter
    assert [(r.first_offset, r.last_offset, r.rejected) for r in p.dead_letter_runs()] == \
        [(0, 1, True)]
    write = p.finish_archiving(0, 1)
    assert write is not None and write.start_offset == 5
    assert p.dead_letter_runs() == () and p.start_offset == 5
    assert p.finish_archiving(0, 1) is None  # nothing left to change


def test_without_a_dead_letter_topic_reject_archives_and_gap_never_dead_letters() -> None:
    p = _acquired()
    res = _ack(p, (0, 1, REJECT), dead_letter=False)
    assert res.write.start_offset == 2  # ARCHIVED at once: the SPSO passes them
    res = _ack(p, (2, 2, GAP), (3, 3, REJECT))
    assert _states(res.write) == [(3, 3, 3)] and res.write.start_offset == 3
    assert [(r.first_offset, r.last_offset) for r in p.dead_letter_runs()] == [(3, 3)]


def test_release_and_lock_expiry_at_the_limit_are_archiving() -> None:
    p = _acquired(limit=1)
    res = _ack(p, (0, 4, RELEASE))
    assert _states(res.write) == [(0, 4, 3)]
    res = p.tick(LOCK, dead_letter=True)  # 5-9 expire at the limit
    assert _states(res.write) == [(5, 9, 3)]
    assert [(r.first_offset, r.last_offset, r.rejected) for r in p.dead_letter_runs()] == \
        [(0, 4, False), (5, 9, False)]


def test_archiving_survives_a_rebuild() -> None:
    cfg = SharePartitionConfig(delivery_count_limit=3)
    state = PersistedShareState(0, 0, 10, -1, (StateBatch(10, 12, 3, 1), StateBatch(13, 14, 2, 1)))
    p = SharePartition.from_persisted(cfg, state)
    assert [(r.first_offset, r.last_offset, r.state) for r in p.dead_letter_runs()] == \
        [(10, 12, RecordState.ARCHIVING)]
    assert p.snapshot().state_batches == state.state_batches
    assert p.next_fetch_offset() == 15  # not acquirable


def test_dead_letter_ranges_are_only_what_is_durably_archiving() -> None:
    p = _acquired(limit=2)
    _ack(p, (0, 4, REJECT))
    durable = PersistedShareState(0, 0, 0, -1, (StateBatch(0, 2, 3, 1),))
    ranges = _dead_letter_ranges(p, durable)
    assert [(r.first_offset, r.last_offset, r.delivery_count, r.rejected) for r in ranges] == \
        [(0, 2, 1, True)]
    # Read back after a restart: rejected below the limit, else over it (Kafka's rule).
    rebuilt = SharePartition.from_persisted(
        p.config, PersistedShareState(0, 0, 0, -1, (StateBatch(0, 1, 3, 1), StateBatch(2, 3, 3, 2))))
    ranges = _dead_letter_ranges(rebuilt, rebuilt.snapshot())
    assert [r.rejected for r in ranges] == [True, False]
    assert _dead_letter_ranges(p, None) == []


def test_headers_are_kafkas() -> None:
    assert dead_letter_headers("g", "orders", 3, 42, 2, True) == [
        ("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"3"),
        ("__dlq.errors.offset", b"42"), ("__dlq.errors.group", b"g"),
        ("__dlq.errors.delivery.count", b"2"),
        ("__dlq.errors.message", b"Offset rejected by client.")]
    assert dead_letter_headers("g", "t", 0, 0, 5, False)[-1] == \
        ("__dlq.errors.message", EXCEEDED.encode())


def test_topic_checks_are_kafkas_in_its_order() -> None:
    def problem(topic: str, prefix: str = "dlq.", exists: bool = True, enabled: bool = True,
                auto: bool = False) -> str | None:
        return dead_letter_topic_problem("g", topic, prefix, exists=exists,
                                         enabled_on_topic=enabled, auto_create=auto)

    assert problem("dlq.x") is None
    assert problem("") == "Configured DLQ topic name in share group: g is empty."
    assert problem("__dlq") == ("Configured DLQ topic name in share group: g cannot start "
                                "with __, topic: __dlq.")
    assert problem("dlq.x", enabled=False) == ("DLQ is not enabled on configured DLQ topic "
                                               "for share group: g, topic: dlq.x.")
    assert problem("dlq.x", exists=False) == ("DLQ topic does not exist and auto create is "
                                              "disabled on cluster for share group: g, topic: "
                                              "dlq.x.")
    assert problem("dlq.x", exists=False, auto=True) is None
    assert problem("other", exists=False, auto=True) == (
        "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: "
        "g, topic: other, prefix: dlq..")  # Kafka's format ends with its own dot
    assert problem("other", prefix="") is None


def _dlq_records(logs: LogManager, topic: str) -> list[Record]:
    plog = logs.get_log(topic, 0)
    assert plog is not None
    read = plog.read(0, 1 << 20, max_offset=plog.log_end_offset)
    data = bytes(read.data)
    return [r for at, _ in iter_batches(data) for r in decode_records(data, at)]


async def _orders(logs: LogManager, records: list[Record], dlq: bool = True):
    """Topic ``orders`` holding ``records`` (durable), and its dead-letter topic."""
    info = logs.create_topic("orders", 1)
    if dlq:
        logs.create_topic("dlq.orders", 1, {"errors.deadletterqueue.group.enable": "true"})
    src = logs.get_log("orders", 0)
    batch = bytearray(build_batch(records))
    src.append(batch, read_header(batch))
    await logs.flusher.wait_acked(src, len(records))
    return info


def test_the_coordinator_writes_dead_letter_records_once_archiving_is_durable(tmp_path) -> None:
    """REJECT two of three records with the lookup saying the group has a dead-letter
    topic that copies records: one dead-letter record each, with the original key and
    value and Kafka's headers, counted in dlq_records; the records end ARCHIVED."""
    configs = {"errors.deadletterqueue.topic.name": "dlq.orders",
               "errors.deadletterqueue.copy.record.enable": True}

    async def run() -> None:
        logs = LogManager(str(tmp_path / "data"))
        await logs.start()
        try:
            info = await _orders(logs, [Record(b"k%d" % i, b"v%d" % i, [("h", b"x")], 5)
                                        for i in range(3)])
            cfg = ShareCoordinatorConfig(auto_offset_reset="earliest")
            shares = ShareCoordinator(logs, cfg, group_config=lambda g, n: configs[n],
                                      share_version=lambda: 2)
            tp = (info.topic_id, 0)
            got = await shares.acquire("g", "m1", [tp], max_records=10, max_bytes=1 << 20)
            assert [(a.first_offset, a.last_offset) for a in got[tp].acquired] == [(0, 2)]
            acks = {tp: [AcknowledgementBatch(0, 2, (REJECT, AcknowledgeType.ACCEPT, REJECT))]}
            assert await shares.acknowledge("g", "m1", acks) == {tp: (0, None)}
            for _ in range(500):  # the dead-letter task runs after the answer
                if shares.stats.dlq_records == 2 and shares.partitions[("g", *tp)].start_offset == 3:
                    break
                await asyncio.sleep(0.01)
            records = _dlq_records(logs, "dlq.orders")
            assert [(r.key, r.value) for r in records] == [(b"k0", b"v0"), (b"k2", b"v2")]
            assert logs.get_log("dlq.orders", 0).log_end_offset == 2
            data = bytes(logs.get_log("dlq.orders", 0).read(0, 1 << 20, max_offset=2).data)
            assert len(list(iter_batches(data))) == 1  # one batch for the acknowledgement
            assert records[1].headers == dead_letter_headers("g", "orders", 0, 2, 1, True)
            assert REJECTED.encode() in dict(records[0].headers).values()
            assert shares.stats.dlq_records == 2
            assert shares.partitions[("g", *tp)].start_offset == 3
            durable = shares.persister.durable[("g", *tp)]
            assert durable.start_offset == 3
            await shares.stop()
        finally:
            await logs.close()

    asyncio.run(run())


def test_at_share_version_1_a_reject_is_archived_without_dead_letter(tmp_path) -> None:
    async def run() -> None:
        logs = LogManager(str(tmp_path / "data"))
        await logs.start()
        try:
            info = await _orders(logs, [Record(b"k", b"v", [], 5)], dlq=False)
            shares = ShareCoordinator(
                logs, ShareCoordinatorConfig(auto_offset_reset="earliest"),
                group_config=lambda g, n: "dlq.orders" if n.endswith("name") else False,
                share_version=lambda: 1)
            tp = (info.topic_id, 0)
            await shares.acquire("g", "m1", [tp], max_records=10, max_bytes=1 << 20)
            acks = {tp: [AcknowledgementBatch(0, 0, (REJECT,))]}
            assert await shares.acknowledge("g", "m1", acks) == {tp: (0, None)}
            assert shares.partitions[("g", *tp)].start_offset == 1  # ARCHIVED at once
            assert shares.stats.dlq_records == 0 and "dlq.orders" not in logs.topics
            await shares.stop()
        finally:
            await logs.close()

    asyncio.run(run())


def test_the_writer_creates_a_missing_topic_only_when_allowed(tmp_path) -> None:
    """errors.deadletterqueue.auto.create.topics.enable: the topic is created marked as a
    dead-letter topic; without it, or outside the prefix, nothing is written (logged)."""
    ranges = [DeadLetterRange(0, 1, 1, True)]

    async def run() -> None:
        logs = LogManager(str(tmp_path / "data"))
        await logs.start()
        try:
            off = DeadLetterWriter(logs, DeadLetterSettings())
            assert await off.write("g", "t", 0, None, ranges, dlq_topic="dlq.new",
                                   copy_record=False) == 0
            assert "dlq.new" not in logs.topics
            auto = DeadLetterWriter(logs, DeadLetterSettings(auto_create_topics=True,
                                                             new_topic_partitions=2))
            assert await auto.write("g", "t", 3, None, ranges, dlq_topic="other",
                                    copy_record=False) == 0
            assert "other" not in logs.topics  # not within errors.deadletterqueue.topic.name.prefix
            assert await auto.write("g", "t", 3, None, ranges, dlq_topic="dlq.new",
                                    copy_record=True) == 2
            info = logs.topics["dlq.new"]
            assert info.partitions == 2
            assert info.configs["errors.deadletterqueue.group.enable"] == "true"
            plog = logs.get_log("dlq.new", 1)  # partition 3 % 2
            data = bytes(plog.read(0, 1 << 20, max_offset=plog.log_end_offset).data)
            records = [r for at, _ in iter_batches(data) for r in decode_records(data, at)]
            assert [(r.key, r.value, dict(r.headers)["__dlq.errors.offset"]) for r in records] \
                == [(None, None, b"0"), (None, None, b"1")]  # no source log: headers only
        finally:
            await logs.close()

    asyncio.run(run())


def test_archiving_read_back_after_a_restart_is_dead_lettered(tmp_path) -> None:
    """The REJECT is durable (ARCHIVING) but the coordinator stops before its dead-letter
    record: a new coordinator on the same logs writes it when the share-partition is
    loaded (Kafka's resume on initialization), then archives the record."""
    configs = {"errors.deadletterqueue.topic.name": "dlq.orders",
               "errors.deadletterqueue.copy.record.enable": True}

    async def run() -> None:
        logs = LogManager(str(tmp_path / "data"))
        await logs.start()
        try:
            info = await _orders(logs, [Record(b"k", b"v", [], 5)])
            tp = (info.topic_id, 0)
            sp = ("g", *tp)

            def coordinator() -> ShareCoordinator:
                return ShareCoordinator(logs, ShareCoordinatorConfig(auto_offset_reset="earliest"),
                                        group_config=lambda g, n: configs[n],
                                        share_version=lambda: 2)

            first = coordinator()
            await first.acquire("g", "m1", [tp], max_records=10, max_bytes=1 << 20)
            first._dead_lettering.add(sp)  # as if it died before its dead-letter task ran
            acks = {tp: [AcknowledgementBatch(0, 0, (REJECT,))]}
            assert await first.acknowledge("g", "m1", acks) == {tp: (0, None)}
            assert first.persister.durable[sp].state_batches[0].delivery_state == 3
            await first.stop()
            assert _dlq_records(logs, "dlq.orders") == []

            second = coordinator()
            got = await second.acquire("g", "m2", [tp], max_records=10, max_bytes=1 << 20)
            assert got[tp].acquired == ()  # ARCHIVING is never delivered
            for _ in range(500):
                if second.persister.durable[sp].start_offset == 1:
                    break
                await asyncio.sleep(0.01)
            records = _dlq_records(logs, "dlq.orders")
            assert [(r.key, r.value) for r in records] == [(b"k", b"v")]
            assert records[0].headers == dead_letter_headers("g", "orders", 0, 0, 1, True)
            assert second.persister.durable[sp].start_offset == 1  # then ARCHIVED
            await second.stop()
        finally:
            await logs.close()

    asyncio.run(run())


_STEPS = st.lists(st.one_of(
    st.tuples(st.just("fetch"), st.integers(1, 6)),
    st.tuples(st.just("ack"), st.integers(0, 11), st.integers(0, 3),
              st.sampled_from([AcknowledgeType.ACCEPT, RELEASE, REJECT, GAP])),
    st.tuples(st.just("expire")),
    st.tuples(st.just("finish")),
), max_size=30)


@settings(max_examples=300, deadline=None)
@given(_STEPS)
def test_with_dead_letters_finished_the_partition_is_the_one_without(steps) -> None:
    """Two share-partitions, one with a dead-letter topic: the same fetches,
    acknowledgements and lock expiries. Whenever every ARCHIVING run of the first is
    finished they are equal; the SPSO never passes an ARCHIVING record; what becomes
    ARCHIVING is what the other archives for a REJECT or at the limit."""
    cfg = SharePartitionConfig(record_lock_duration_ms=LOCK, delivery_count_limit=2)
    dlq, plain = SharePartition.initialize(cfg, 0)[0], SharePartition.initialize(cfg, 0)[0]
    now = 0
    batches = [FetchedBatch(i, i + 1) for i in range(0, 12, 2)]

    def finish_all() -> None:
        for r in dlq.dead_letter_runs():
            dlq.finish_archiving(r.first_offset, r.last_offset)

    for step in steps:
        if step[0] == "fetch":
            for p in (dlq, plain):
                start = p.next_fetch_offset()
                fetched = [b for b in batches if b.last_offset >= start]
                if fetched:
                    p.acquire("m", fetched, fetch_offset=start, now_ms=now, max_records=step[1])
        elif step[0] == "ack":
            _, first, span, kind = step
            ab = [AcknowledgementBatch(first, min(first + span, 11), (kind,))]
            same = not dlq.dead_letter_runs()
            a = dlq.acknowledge("m", ab, now_ms=now, dead_letter=True)
            b = plain.acknowledge("m", ab, now_ms=now)
            if a.error_code != b.error_code:
                # An ARCHIVING record is not acknowledgeable (the other one's SPSO passed
                # it): once its dead-letter record is done, the same request is.
                assert not same
                finish_all()
                assert dlq.acknowledge("m", ab, now_ms=now, dead_letter=True).error_code == \
                    b.error_code
        elif step[0] == "expire":
            now += LOCK
            dlq.tick(now, dead_letter=True)
            plain.tick(now)
        else:
            finish_all()
        runs = dlq.dead_letter_runs()
        assert all(r.first_offset >= dlq.start_offset for r in runs)
        for r in runs:  # the other archived exactly these
            for o in range(r.first_offset, r.last_offset + 1):
                other = plain.record_state(o)
                assert other is None and o < plain.start_offset or \
                    other is not None and other.state is RecordState.ARCHIVED
        if not runs:
            assert dlq.snapshot() == plain.snapshot()
    finish_all()
    assert dlq.snapshot() == plain.snapshot()


def test_a_record_in_flight_at_the_limit_when_the_broker_stopped_is_dead_lettered(tmp_path) -> None:
    """Its acquisition (at the limit) is durable, its lock never ran out: a new
    coordinator rebuilds it as expired at the limit, so with a dead-letter topic it is
    written there (EXCEEDED), then archived."""
    configs = {"errors.deadletterqueue.topic.name": "dlq.orders",
               "errors.deadletterqueue.copy.record.enable": False}

    async def run() -> None:
        logs = LogManager(str(tmp_path / "data"))
        await logs.start()
        try:
            info = await _orders(logs, [Record(b"k", b"v", [], 5)])
            tp = (info.topic_id, 0)
            sp = ("g", *tp)
            cfg = ShareCoordinatorConfig(auto_offset_reset="earliest",
                                         partition=SharePartitionConfig(delivery_count_limit=2))

            def coordinator() -> ShareCoordinator:
                return ShareCoordinator(logs, cfg, group_config=lambda g, n: configs[n],
                                        share_version=lambda: 2)

            first = coordinator()
            for member in ("m1", "m2"):  # delivered twice: m1 releases, m2 holds it
                got = await first.acquire("g", member, [tp], max_records=10, max_bytes=1 << 20)
                assert [a.delivery_count for a in got[tp].acquired] == [1 if member == "m1" else 2]
                if member == "m1":
                    acks = {tp: [AcknowledgementBatch(0, 0, (RELEASE,))]}
                    assert await first.acknowledge("g", "m1", acks) == {tp: (0, None)}
            await first.stop()
            second = coordinator()
            got = await second.acquire("g", "m3", [tp], max_records=10, max_bytes=1 << 20)
            assert got[tp].acquired == ()
            for _ in range(500):
                if second.persister.durable[sp].start_offset == 1:
                    break
                await asyncio.sleep(0.01)
            (record,) = _dlq_records(logs, "dlq.orders")
            assert record.headers == dead_letter_headers("g", "orders", 0, 0, 2, False)
            assert (record.key, record.value) == (None, None)
            assert second.persister.durable[sp].start_offset == 1
            await second.stop()
        finally:
            await logs.close()

    asyncio.run(run())
