"""An idempotent producer's state after the broker restarts, on txbroker and on Apache
Kafka (issue 42, item 4: OUT_OF_ORDER_SEQUENCE_NUMBER seen by the chaos feeder right
after a broker SIGKILL).

Seven one-record batches (sequences 0-6) are written, the broker is SIGKILLed (or
stopped cleanly) and started again on the same data, and the producer then sends what
a client retrying after the crash may send: the last batch again, older ones, the next
one, one past a gap. What each is answered says what the broker rebuilt from its log
and snapshots: which batches it still recognises as duplicates (answered with their
original offsets, not written again), where it expects the next sequence, and what it
refuses.

One difference is deliberate (docs/compatibility.md, "An idempotent producer after a
restart"): after a restart, clean or SIGKILL, Kafka 4.4 knows only the last batch of
each producer (its producer snapshot holds one), so it answers an older retried batch
OUT_OF_ORDER_SEQUENCE_NUMBER although that batch is in its log; txbroker's state keeps
the last five through a restart, as Kafka's does while it runs, and answers the batch
as the duplicate it is, with its offset. Both refuse a batch older than the five and
one past a gap alike."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.helpers import RawClient
from tests.integration.txn_util import RawTxn
from tests.kafka_reference import KafkaProcess

from .conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, _kafka_leg_unavailable

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
TOPIC = "idempotent-restart"


class Restartable:
    """txbroker (a process) or Kafka, on one data directory and port across restarts."""

    def __init__(self, name: str, work_dir) -> None:
        self.name = name
        if name == "txbroker":
            from txbroker.testing import BrokerProcess

            self.proc = BrokerProcess(str(work_dir / "data"), dict(COMMON_CONFIG)).start()
        else:
            self.proc = KafkaProcess(work_dir, dict(COMMON_CONFIG)).start()

    @property
    def address(self) -> tuple[str, int]:
        return self.proc.host, self.proc.port

    def restart(self, how: str) -> None:
        if how == "sigkill":
            self.proc.kill()
        else:
            # (the JVM exits 143 after its shutdown hook ran a controlled shutdown)
            assert self.proc.terminate() in (0, 143)
        if self.name == "txbroker":
            self.proc.start()
        else:
            self.proc.launch(time.monotonic() + 90)

    def stop(self) -> None:
        self.proc.kill()


@pytest.fixture(params=BROKER_PARAMS)
def restartable(request, tmp_path) -> Iterator[Restartable]:
    if request.param == "kafka":
        why = _kafka_leg_unavailable()
        if why:
            pytest.skip(why)
    broker = Restartable(request.param, tmp_path)
    try:
        yield broker
    finally:
        broker.stop()


def _produce_until_served(txn: RawTxn, tp, batch: bytes, deadline: float) -> tuple[int, int]:
    """Produce, retrying what a restarted broker answers while it takes its partitions
    back (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION)."""
    while True:
        code, offset = txn.produce(tp, batch, version=9)
        if code not in (3, 6) or time.monotonic() > deadline:
            return code, offset
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["sigkill", "clean"])
def test_retried_batches_after_a_restart(restartable, how):
    tp = (TOPIC, 0)
    wire = Broker(restartable.name, *restartable.address)
    wire.create_topic(TOPIC)
    wire.close()
    client = RawClient(*restartable.address, timeout=30)
    try:
        txn = RawTxn(client, None)
        deadline = time.monotonic() + 30
        while txn.init().error_code != 0 and time.monotonic() < deadline:
            time.sleep(0.2)  # Kafka's producer id manager answers once it is ready
        batches = [txn.batch(tp, [b"v%d" % i], sequence=i, transactional=False)
                   for i in range(7)]
        for i, batch in enumerate(batches):
            assert _produce_until_served(txn, tp, batch, time.monotonic() + 30) == (0, i)
    finally:
        client.close()

    restartable.restart(how)

    client = RawClient(*restartable.address, timeout=30)
    try:
        txn.client = client
        deadline = time.monotonic() + 60

        def answer(seq: int) -> tuple[int, int]:
            return _produce_until_served(
                txn, tp, txn.batch(tp, [b"v%d" % seq], sequence=seq, transactional=False),
                deadline)

        got = {"last batch again": answer(6), "next": answer(7)}
        got["oldest of the five"] = answer(3)
        got["older than five"] = answer(1)
        got["past a gap"] = answer(9)[0]
    finally:
        client.close()

    print(f"\n{restartable.name} after {how}: {got}")
    expected = {"last batch again": (0, 6), "next": (0, 7),
                # Never written twice: an old batch is a duplicate or refused.
                "older than five": (OUT_OF_ORDER_SEQUENCE_NUMBER, -1),
                "past a gap": OUT_OF_ORDER_SEQUENCE_NUMBER}
    if restartable.name == "kafka":
        # Kafka's rebuilt state holds the last batch only (see the module docstring).
        expected["oldest of the five"] = (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    else:
        expected["oldest of the five"] = (0, 3)
    assert got == expected
