"""The sample payments pipeline (spark_jobs/payments) against an in-process broker:
generator → transactional processor (a process) that aborts every 3rd transaction and
SIGKILLs itself mid-transaction → a restarted processor with the same transactional.id.

A read_committed consumer sees every valid order exactly once in ``payments`` and every
invalid one exactly once in ``payments-rejected``, with totals equal to the ledger and
no record of an aborted attempt; a read_uncommitted consumer sees the aborted records
too (so the aborts and the fenced zombie really left data in the log).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from txbroker.spark_jobs.payments.orders import LedgerEntry
from txbroker.spark_jobs.payments.pipeline import PipelineConfig, read_topic, run_pipeline

from .txn_util import TXN_CONFIG

CONFIG = PipelineConfig(orders=300, seed=5, batch=20, abort_every=3, crash_at=4,
                        processor_timeout=60)


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def values(bootstrap: str, topic: str, committed: bool) -> list[dict]:
    return [json.loads(v) for v in read_topic(bootstrap, topic, committed=committed)]


def test_pipeline_is_exactly_once_despite_aborts_and_a_crash(txbroker, tmp_path):
    result = run_pipeline(txbroker.bootstrap, tmp_path, CONFIG)
    ledger, attempts = result.ledger, result.attempts
    assert result.crashes == 1 and result.processor_runs == 2
    assert len(attempts.crashed) == 1 and attempts.crashed[0].startswith("p1-")
    assert len(attempts.aborted) >= 2  # at least one deliberate abort per processor
    assert set(attempts.aborted.values()) == {"deliberate"}
    assert attempts.committed_orders == CONFIG.orders
    assert not set(attempts.committed) & attempts.not_committed

    payments = values(txbroker.bootstrap, CONFIG.payments_topic, committed=True)
    rejected = values(txbroker.bootstrap, CONFIG.rejected_topic, committed=True)
    # Exactly once: each order once, in the right topic, nothing from an aborted attempt.
    ids = [v["order_id"] for v in payments + rejected]
    assert len(ids) == len(set(ids)) == CONFIG.orders
    assert set(ids) == set(result.order_ids)
    assert {v["attempt"] for v in payments + rejected} <= set(attempts.committed)
    assert all(v["status"] == "accepted" for v in payments)
    totals: dict[tuple[str, str], LedgerEntry] = {}
    for v in payments:
        e = totals.get((v["account"], v["currency"]), LedgerEntry())
        totals[(v["account"], v["currency"])] = LedgerEntry(
            e.count + 1, e.amount + v["amount"], e.fee + v["fee"],
            e.amount_eur + v["amount_eur"])
    assert totals == ledger.accounts
    assert Counter(v["reason"] for v in rejected) == ledger.rejected

    # The aborted attempts' records are in the log, visible to read_uncommitted only.
    everything = values(txbroker.bootstrap, CONFIG.payments_topic, committed=False)
    everything += values(txbroker.bootstrap, CONFIG.rejected_topic, committed=False)
    by_attempt = Counter(v["attempt"] for v in everything)
    for attempt in attempts.not_committed:
        assert by_attempt[attempt] > 0, f"no record of aborted attempt {attempt} in the log"
    assert len(everything) == CONFIG.orders + sum(by_attempt[a] for a in attempts.not_committed)

    # The group's committed offsets (sent in the transactions) end at the input's end.
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": CONFIG.group})
    try:
        tps = [TopicPartition(CONFIG.orders_topic, p) for p in range(CONFIG.partitions)]
        committed = c.committed(tps, timeout=10)
        ends = [c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        assert [tp.offset for tp in committed] == ends
    finally:
        c.close()
