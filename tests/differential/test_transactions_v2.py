"""Transactions v2 (KIP-890 part 2) on txbroker and on Apache Kafka 4.4.0, which both
finalize ``transaction.version`` 2: the Java 4 producer uses it (epoch bump at every
EndTxn, partitions added by Produce v12, TxnOffsetCommit v5 without AddOffsetsToTxn),
a late duplicate of the previous transaction is refused on the raw wire, and
transactions v1 producers (confluent-kafka) interleave with v2 ones on the same
partitions."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.txn_util import RawTxn, TxnProducer, read_all, unique

from .jvm import run_java_steps, run_tools
from .test_transactions import wait_stable
from .util import init_txn

INVALID_PRODUCER_EPOCH = 47
PRODUCE_V2 = 12  # the first Produce version of transactions v2 (implicit add)
END_TXN_V2 = 5


def test_java_producer_uses_transactions_v2(broker, jvm_classes):
    """Kafka's Java producer sees transaction.version 2 and runs the v2 protocol:
    commit/abort visibility (and an abort with nothing sent), one epoch bump per
    transaction in the partition's producer state, fencing by a new instance, and
    consume-transform-produce with a worker killed mid-transaction."""
    steps = run_java_steps(jvm_classes, "Tv2Clients", broker.bootstrap, unique("tv2"))
    assert list(steps) == ["feature", "commit_abort_visibility", "epoch_bump_per_transaction",
                           "fencing", "consume_transform_produce_killed_worker"], steps
    failed = {name: detail for name, (ok, detail) in steps.items() if not ok}
    assert not failed, failed
    assert steps["feature"][1] == "finalized=2 supported=0-2"


def _produce(txn: RawTxn, tp, batch, timeout: float = 15) -> tuple[int, int]:
    """Produce v12, retried on what a client retries (the implicit add answers
    CONCURRENT_TRANSACTIONS / NOT_ENOUGH_REPLICAS while the previous transaction ends)."""
    deadline = time.monotonic() + timeout
    while True:
        error, offset = txn.produce(tp, batch, version=PRODUCE_V2)
        if error not in (15, 16, 19, 51) or time.monotonic() > deadline:
            return error, offset
        time.sleep(0.05)


@contextlib.contextmanager
def raw_producer(broker, prefix: str) -> Iterator[tuple[tuple[str, int], RawTxn]]:
    """A new one-partition topic and an initialized raw-wire producer of a new id."""
    tp = (broker.topic(prefix), 0)
    tid = unique(prefix)
    broker.wait_coordinator(tid)
    client = broker.raw()
    try:
        txn = RawTxn(client, tid)
        assert init_txn(txn).error_code == 0
        yield tp, txn
    finally:
        client.close()


def test_late_duplicate_of_previous_transaction_is_rejected(broker):
    """The hole transactions v2 closes: a retry of a batch of transaction 1 that arrives
    after its commit (same epoch, sequence 0) must not land in transaction 2. The commit
    bumped the epoch, so the partition refuses the old epoch, before and during the
    next transaction, and nothing of it is appended."""
    with raw_producer(broker, "tv2-late") as (tp, txn):
        epoch = txn.epoch
        first = txn.batch(tp, [b"t1"])
        assert _produce(txn, tp, first) == (0, 0)
        assert txn.end(True, version=END_TXN_V2) == 0
        assert txn.epoch == epoch + 1  # EndTxn v5 answered the bumped epoch
        wait_stable(broker, [tp])
        late_error, _ = txn.produce(tp, first, version=PRODUCE_V2)
        assert late_error == INVALID_PRODUCER_EPOCH
        assert _produce(txn, tp, txn.batch(tp, [b"t2"])) == (0, 2)  # epoch + 1, sequence 0
        late_error, _ = txn.produce(tp, first, version=PRODUCE_V2)
        assert late_error == INVALID_PRODUCER_EPOCH
        assert txn.end(True, version=END_TXN_V2) == 0
        assert txn.epoch == epoch + 2
    # The last marker is written after EndTxn's answer: wait for it (the high watermark
    # may lag the append, so a stable offset alone does not say it is there).
    deadline = time.monotonic() + 15
    while (ends := wait_stable(broker, [tp]))[tp] < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ends == {tp: 4}  # t1, its marker, t2, its marker: no duplicate
    assert read_all("confluent", broker.bootstrap, ends) == {tp: [b"t1", b"t2"]}


def test_v1_and_v2_producers_interleave(broker, jvm_classes):
    """A confluent-kafka producer (librdkafka: transactions v1, AddPartitionsToTxn v0,
    EndTxn v1) and a Java 4 producer (v2) run transactions on the same two partitions
    at the same time, each aborting some: read_committed readers see exactly the
    committed records of both, in each producer's order."""
    topic = broker.topic("tv2-mixed", partitions=2)
    tps = [(topic, 0), (topic, 1)]
    prefix = unique("tv2-mixed")
    java: dict = {}
    thread = threading.Thread(target=lambda: java.update(run_java_steps(
        jvm_classes, "Tv2Clients", broker.bootstrap, prefix, "interleave", topic, "12")))
    thread.start()
    committed_v1 = []
    try:
        with TxnProducer("confluent", broker.bootstrap, prefix + "-v1") as prod:
            prod.init()
            for i in range(12):
                prod.begin()
                abort = i % 4 == 3
                for p in (0, 1):
                    value = f"{'v1-aborted' if abort else 'v1'}-{i}-{p}".encode()
                    prod.send(topic, value, partition=p)
                    if not abort:
                        committed_v1.append(value)
                prod.flush()
                prod.abort() if abort else prod.commit()
    finally:
        thread.join(timeout=240)
    assert java.get("interleave", (False, "did not run"))[0], java
    assert java["interleave"][1] == "committed=8"
    ends = wait_stable(broker, tps)
    seen = read_all("confluent", broker.bootstrap, ends)
    values = [v for tp in tps for v in seen[tp]]
    assert not [v for v in values if b"aborted" in v], values
    assert sorted(v for v in values if v.startswith(b"v1-")) == sorted(committed_v1)
    java_values = [v for v in values if v.startswith(b"java-")]
    assert len(java_values) == 16  # 8 committed transactions x 2 partitions
    for tp in tps:  # each producer's records in its order within a partition
        for mine in (b"v1-", b"java-"):
            own = [int(v.split(b"-")[1]) for v in seen[tp] if v.startswith(mine)]
            assert own == sorted(own), (tp, mine, own)


@pytest.mark.parametrize("version", [0, 1])
def test_v1_request_versions_keep_v1_rules(broker, version):
    """On a broker at transaction.version 2, EndTxn below v5 is still transactions v1
    (Kafka decides per request): no epoch bump, no id/epoch in the answer."""
    with raw_producer(broker, "tv2-v1rules") as (tp, txn):
        epoch = txn.epoch
        for value in (b"a", b"b"):
            assert txn.add_partitions([tp], version=3) == {tp: 0}
            assert txn.produce(tp, txn.batch(tp, [value]), version=9)[0] == 0
            assert txn.end(True, version=3 + version) == 0
            assert txn.epoch == epoch
            wait_stable(broker, [tp])
    assert read_all("confluent", broker.bootstrap, wait_stable(broker, [tp])) == {tp: [b"a", b"b"]}


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_fencing_an_ongoing_transaction(broker, v2):
    """A new producer instance fences the ongoing transaction of a v1 or v2 producer:
    Kafka 4.3.1 aborts either with one epoch bump (no second bump for v2), and the new
    instance gets the epoch after that; the old producer's EndTxn is fenced."""
    with raw_producer(broker, "tv2-fence") as (tp, old):
        if v2:
            assert _produce(old, tp, old.batch(tp, [b"zombie"])) == (0, 0)
        else:
            assert old.add_partitions([tp], version=3) == {tp: 0}
            assert old.produce(tp, old.batch(tp, [b"zombie"]), version=9)[0] == 0
        second = broker.raw()
        new = RawTxn(second, old.transactional_id)
        assert init_txn(new).error_code == 0
        second.close()
        # One bump for the fence (its abort's markers carry it), one for the new instance.
        assert new.epoch == old.epoch + 2
        assert old.end(True, version=END_TXN_V2 if v2 else 3) == 90  # PRODUCER_FENCED
    ends = wait_stable(broker, [tp])
    assert read_all("confluent", broker.bootstrap, ends).get(tp, []) == []


def test_kafka_features_describe_shows_transaction_version(broker, jvm_classes, tmp_path):
    """`kafka-features describe` (Admin describeFeatures, i.e. ApiVersions) shows
    transaction.version supported 0-2 and finalized at 2 on both brokers."""
    [result] = run_tools(jvm_classes, tmp_path, [
        ["kafka-features", "--bootstrap-server", broker.bootstrap, "describe"]])
    assert result.exit == 0, result.output
    [line] = [line for line in result.lines() if "Feature: transaction.version" in line]
    fields = dict(re.findall(r"(\w+): (\S+)", line))
    assert (fields["SupportedMinVersion"], fields["SupportedMaxVersion"],
            fields["FinalizedVersionLevel"]) == ("0", "2", "2"), line
    # The epoch differs: Kafka's is a metadata offset, txbroker's its start time (ms).
    assert int(fields["Epoch"]) > 0


def _features(broker, *args: str) -> list[str]:
    return ["kafka-features", "--bootstrap-server", broker.bootstrap, *args]


def _tv_line(result) -> str:
    """The transaction.version line of `kafka-features describe`, its epoch left out
    (Kafka's is a metadata offset, txbroker's a time in ms)."""
    [line] = [x for x in result.lines() if "Feature: transaction.version" in x]
    return re.sub(r"\s+Epoch: \d+$", "", " ".join(line.split()))


REFUSED = ("Could not {verb} transaction.version to {level}. The update failed for all "
           "features since the following feature had an error: Invalid update version "
           "{level} for feature transaction.version. {reason}\n1 out of 1 operation(s) failed.")


def test_kafka_features_upgrade_and_downgrade(broker, jvm_classes, tmp_path):
    """`kafka-features` changes transaction.version (UpdateFeatures) with the same
    output on both brokers: downgrade (with --dry-run first), an upgrade to a lower
    level refused, levels outside 0-2 refused, disable, and upgrade back to 2."""
    commands = [
        ("upgrade", "--feature", "transaction.version=1"),
        ("downgrade", "--feature", "transaction.version=1", "--dry-run"),
        ("downgrade", "--feature", "transaction.version=1"),
        ("describe",),
        ("upgrade", "--feature", "transaction.version=3"),
        ("downgrade", "--feature", "transaction.version=3"),
        ("upgrade", "--feature", "transaction.version=2", "--dry-run"),
        ("describe",),
        ("disable", "--feature", "transaction.version"),
        ("describe",),
        ("upgrade", "--feature", "transaction.version=2"),
        ("describe",),
        ("upgrade", "--feature", "nosuch.feature=1"),
        ("disable", "--feature", "nosuch.feature"),
    ]
    try:
        results = run_tools(jvm_classes, tmp_path, [_features(broker, *c) for c in commands])
    finally:
        # The brokers are shared by the session: transaction.version 2 again, whatever happened.
        [restore] = run_tools(jvm_classes, tmp_path / "restore", [
            _features(broker, "upgrade", "--feature", "transaction.version=2")])
    assert restore.exit == 0, restore.output
    downgrade_first = "Can't downgrade the version of this feature without setting the " \
                      "upgrade type to either safe or unsafe downgrade."
    only_0_2 = "Local controller 1 only supports versions 0-2"
    line = "Feature: transaction.version SupportedMinVersion: 0 SupportedMaxVersion: 2 " \
           "FinalizedVersionLevel: {}"
    expected = [
        (1, REFUSED.format(verb="upgrade", level=1, reason=downgrade_first)),
        (0, "transaction.version can be downgraded to 1."),
        (0, "transaction.version was downgraded to 1."),
        (0, line.format(1)),
        (1, REFUSED.format(verb="upgrade", level=3, reason=only_0_2)),
        (1, REFUSED.format(verb="downgrade", level=3, reason=only_0_2)),
        (0, "transaction.version can be upgraded to 2."),
        (0, line.format(1)),  # the dry run changed nothing
        (0, "transaction.version was disabled."),
        (0, line.format(0)),
        (0, "transaction.version was upgraded to 2."),
        (0, line.format(2)),
        (1, REFUSED.format(verb="upgrade", level=1, reason="Local controller 1 does not "
                           "support this feature.").replace("transaction.version",
                                                            "nosuch.feature")),
        (1, "Could not disable nosuch.feature. The update failed for all features since the "
            "following feature had an error: Invalid update version 0 for feature "
            "nosuch.feature. Feature nosuch.feature not found.\n"
            "1 out of 1 operation(s) failed."),
    ]
    got = [(r.exit, _tv_line(r) if r.command[3] == "describe" else r.output.strip())
           for r in results]
    assert got == expected


def test_producer_started_after_a_downgrade_uses_transactions_v1(broker, jvm_classes):
    """transaction.version downgraded to 1 (Admin.updateFeatures) while a Java v2
    transaction is open: that transaction commits as v2 (its epoch bumped); a producer
    started afterwards runs v1 (no bump per transaction); both are read committed.
    The feature is finalized at 2 again at the end."""
    steps = run_java_steps(jvm_classes, "Tv2Clients", broker.bootstrap, unique("tvdown"),
                           "downgrade")
    assert list(steps) == ["open_v2_transaction", "downgrade_to_1", "open_transaction_commits",
                           "new_producer_uses_v1", "all_committed"], steps
    failed = {name: detail for name, (ok, detail) in steps.items() if not ok}
    assert not failed, failed
