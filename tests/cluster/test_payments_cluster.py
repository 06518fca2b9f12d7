"""The payments pipeline of ``make demo``, unchanged, on the three-node Kafka cluster
(issue 30, item 2), across broker fail-overs.

Once on txbroker (the in-process broker, the single-broker run the demo does) and once
on the cluster: the idempotent generator, the transactional processor that aborts on
purpose and SIGKILLs itself mid-transaction, then Spark ingestion (``local[2]``) of both
output topics with the ``txbroker`` source and with Spark's ``format("kafka")``. On the
cluster, mid-run:

- while the processor commits, the broker leading ``payments-0`` is SIGKILLed, and
  restarted once the processor has committed more without it;
- then the broker holding the transaction coordinator of the processor's
  transactional.id, likewise;
- during each Spark ingestion, the broker leading a partition being read.

The Parquet tables must pass ``payments/verify.py`` (nothing aborted, nothing twice,
totals equal to the ledger) and hold the same records as the txbroker run's table
(topic, key and value; the value's ``attempt`` names the transaction attempt, which
depends on where the fail-overs fell, so it is left out of the comparison).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from txbroker.spark_jobs.ingest import ingest
from txbroker.spark_jobs.payments.journal import read_journal
from txbroker.spark_jobs.payments.pipeline import (
    PipelineConfig,
    PipelineResult,
    read_topic,
    run_pipeline,
)
from txbroker.spark_jobs.payments.verify import verify

from tests.cluster.faults import FailOver, Kill
from tests.integration.spark.conftest import connector_missing
from tests.integration.txn_util import TXN_CONFIG

pytestmark = pytest.mark.cluster

# Small transactions, so that the processor is still committing when the fail-overs
# come: ~100 commits and ~30 aborts.
CONFIG = PipelineConfig(orders=1000, seed=30, batch=10, abort_every=4, crash_at=6,
                        processor_timeout=240)
TOPICS = [CONFIG.orders_topic, CONFIG.payments_topic, CONFIG.rejected_topic]
BOTH = f"{CONFIG.payments_topic},{CONFIG.rejected_topic}"


@pytest.fixture(scope="module")
def spark():
    from tests.integration.spark_util import shared_spark

    return shared_spark()


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def _commits(workdir: Path) -> int:
    return sum(len(read_journal(j).committed) for j in workdir.glob("attempts-*.jsonl"))


def _records(spark, table: str) -> list[tuple]:
    """(topic, key, value without ``attempt``) of every row, sorted."""
    rows = spark.read.parquet(table).select("topic", "key", "value").collect()
    out = []
    for r in rows:
        value = json.loads(bytes(r.value))
        value.pop("attempt")
        out.append((r.topic, bytes(r.key), json.dumps(value, sort_keys=True)))
    return sorted(out)


def _verify(spark, table: str, result: PipelineResult) -> None:
    verified = verify(spark, table, ledger=result.ledger,
                      aborted_attempts=result.aborted_attempts,
                      committed_attempts=result.attempts.committed, order_ids=result.order_ids)
    assert verified.passed, verified.report()
    assert verified.rows == CONFIG.orders


def _batches(checkpoint: Path) -> int:
    """Micro-batches the query has planned (written to its offset log)."""
    offsets = checkpoint / "offsets"
    return len([p for p in offsets.iterdir() if p.name.isdigit()]) if offsets.exists() else 0


def _ingest_with_fail_over(spark, cluster, work: Path, source: str, partition: tuple[str, int]
                           ) -> str:
    """Ingest both output topics with ``source`` while the leader of ``partition`` is
    killed after the first micro-batch and restarted two batches later."""
    table, checkpoint = str(work / f"lake-{source}"), work / f"checkpoint-{source}"
    seen = {}

    def planned_after_kill() -> bool:
        return _batches(checkpoint) >= seen.setdefault("at_kill", _batches(checkpoint)) + 2

    kill = Kill(f"leader of {partition[0]}-{partition[1]} during {source} ingestion",
                before=lambda: _batches(checkpoint) >= 2,
                victim=lambda: cluster.leader(*partition),
                after=planned_after_kill)
    chaos = FailOver(cluster, [kill], in_sync=TOPICS)
    chaos.start()
    try:
        ingested = ingest(spark, bootstrap_servers=cluster.bootstrap, topic=BOTH, output=table,
                          checkpoint=str(checkpoint), source_format=source,
                          max_offsets_per_trigger=150)
    finally:
        [kill] = chaos.finish()
    # The kill came mid-query: batches were planned after it, without that broker.
    assert kill.progress_while_down, f"{source}: no micro-batch while node {kill.node} was down"
    assert ingested.rows_written == CONFIG.orders
    return table


def test_pipeline_on_cluster_matches_txbroker(txbroker, kafka_cluster, spark, tmp_path):
    # The single-broker run: txbroker, local[2], the txbroker source.
    (tmp_path / "txbroker").mkdir()
    on_txbroker = run_pipeline(txbroker.bootstrap, tmp_path / "txbroker", CONFIG)
    assert on_txbroker.crashes == 1
    table = str(tmp_path / "txbroker" / "lake")
    ingest(spark, bootstrap_servers=txbroker.bootstrap, topic=BOTH, output=table,
           checkpoint=str(tmp_path / "txbroker" / "checkpoint"))
    _verify(spark, table, on_txbroker)
    expected = _records(spark, table)
    assert len(expected) == CONFIG.orders

    # The same pipeline on the cluster, a partition leader and then the transaction
    # coordinator killed and restarted while the processor commits.
    cluster = kafka_cluster
    work = tmp_path / "cluster"
    work.mkdir()
    marks: dict[str, int] = {}

    def commits_since(name: str, n: int):
        return lambda: _commits(work) >= marks.setdefault(name, _commits(work)) + n

    kills = [
        Kill("leader of payments-0", before=lambda: _commits(work) >= 5,
             victim=lambda: cluster.leader(CONFIG.payments_topic, 0),
             after=commits_since("leader", 3)),
        Kill("transaction coordinator", before=commits_since("restarted", 3),
             victim=lambda: cluster.coordinator(CONFIG.transactional_id),
             after=commits_since("coordinator", 3)),
    ]
    chaos = FailOver(cluster, kills, in_sync=TOPICS)
    chaos.start()
    try:
        result = run_pipeline(cluster.bootstrap, work, CONFIG)
    finally:
        chaos.finish()
    for kill in kills:
        print(f"{kill.what}: node {kill.node} killed, restarted "
              f"{kill.restarted_at - kill.killed_at:.1f}s later")
        assert kill.progress_while_down, f"no commit while node {kill.node} was down"
    assert result.crashes == 1 and result.processor_runs == 2
    assert result.attempts.committed_orders == CONFIG.orders
    # A fail-over may make the client abort a transaction (then processed again).
    assert all(r == "deliberate" or r.startswith("error") for r in result.attempts.aborted.values())
    committed = read_topic(cluster.bootstrap, CONFIG.payments_topic)
    assert len(committed) == on_txbroker.ledger.valid

    # Spark (local[2]) with both sources, a leader killed mid-query each time.
    for source, partition in (("txbroker", (CONFIG.payments_topic, 1)),
                              ("kafka", (CONFIG.rejected_topic, 0))):
        if source == "kafka" and connector_missing():
            pytest.skip(connector_missing())
        t0 = time.monotonic()
        table = _ingest_with_fail_over(spark, cluster, work, source, partition)
        print(f"{source} source: ingested in {time.monotonic() - t0:.1f}s")
        _verify(spark, table, result)
        assert _records(spark, table) == expected, f"{source}: not the txbroker run's records"
