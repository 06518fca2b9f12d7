"""Issue 42, torn writes: power losses that tear what was not fsynced (random 4 KiB pages
persist, checkpoints and snapshots may be half-written), with transactions in flight.
Nothing acknowledged is lost, read_committed sees no aborted or unfinished transaction,
and the broker starts and serves."""

from __future__ import annotations

import pytest

from .clients import Msg, produce
from .txn_util import TXN_CONFIG, TxnProducer, log_ends, read_all, unique, wait_state


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_torn_power_loss_with_transactions_in_flight(txbroker, seed):
    topic = unique(f"torn{seed}")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    acked = {tp: [b"acked-%d-%d" % (tp[1], i) for i in range(20)] for tp in tps}
    for (t, p), values in acked.items():
        produce("kafka-python", txbroker.bootstrap, t,
                [Msg(None, v, partition=p) for v in values], acks="all")
    tid = unique(f"torn-{seed}")
    producer = TxnProducer("confluent", txbroker.bootstrap, tid,
                           **{"metadata.recovery.strategy": "none"})
    try:
        producer.init()
        producer.begin()
        for t, p in tps:
            producer.send(t, b"committed-%d" % p, partition=p)
        producer.commit()
        wait_state(txbroker, tid, ["CompleteCommit"])
        producer.begin()
        for t, p in tps:
            producer.send(t, b"aborted-%d" % p, partition=p)
        producer.abort()
        producer.begin()
        for t, p in tps:  # in flight when the power goes
            producer.send(t, b"open-%d" % p, partition=p)
        producer.flush()
        txbroker.crash(power_loss=True, torn_seed=seed)
        txbroker.restart()
    finally:
        producer.close()  # after the restart: a client closing mid-transaction waits
    got = read_all("kafka-python", txbroker.bootstrap, log_ends(txbroker, tps))
    for t, p in tps:
        values = got.get((t, p), [])
        assert values[:20] == acked[(t, p)], "an acknowledged record was lost"
        assert values[20:] == [b"committed-%d" % p], values[20:]
    # The transactional id carries on: its open transaction is aborted, a new one commits.
    with TxnProducer("kafka-python", txbroker.bootstrap, tid) as again:
        again.init()
        again.begin()
        again.send(topic, b"after", partition=0)
        again.commit()
    got = read_all("kafka-python", txbroker.bootstrap, log_ends(txbroker, tps))
    assert got[(topic, 0)] == [*acked[(topic, 0)], b"committed-0", b"after"]
