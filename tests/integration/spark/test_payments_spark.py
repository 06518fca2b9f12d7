"""The payments pipeline end to end through Spark: run it (aborts, a crash) against an
in-process broker, ingest both output topics with ``txbroker.spark_jobs.ingest`` (txbroker
source, availableNow) into Parquet, and prove the Parquet with ``payments/verify.py``.
Also: verify's checks fail on Parquet that holds aborted or duplicated records.
``spark`` is the session shared by the Spark tests (conftest.py)."""

from __future__ import annotations

import json

import pytest
from txbroker.spark_jobs.payments.orders import expected_ledger, generate_orders, process
from txbroker.spark_jobs.payments.pipeline import PipelineConfig, run_pipeline
from txbroker.spark_jobs.payments.verify import verify

from tests.integration.txn_util import TXN_CONFIG

CONFIG = PipelineConfig(orders=240, seed=9, batch=20, abort_every=3, crash_at=4,
                        processor_timeout=60)


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def test_ingested_payments_match_the_ledger(txbroker, tmp_path, spark):
    from txbroker.spark_jobs.ingest import ingest

    result = run_pipeline(txbroker.bootstrap, tmp_path, CONFIG)
    assert result.crashes == 1 and result.attempts.aborted
    table = str(tmp_path / "lake")
    ingested = ingest(spark, bootstrap_servers=txbroker.bootstrap,
                      topic=f"{CONFIG.payments_topic},{CONFIG.rejected_topic}", output=table,
                      checkpoint=str(tmp_path / "checkpoint"))
    assert ingested.rows_written == CONFIG.orders

    verified = verify(spark, table, ledger=result.ledger,
                      aborted_attempts=result.aborted_attempts,
                      committed_attempts=result.attempts.committed,
                      order_ids=result.order_ids)
    assert verified.passed, verified.report()
    assert verified.payments_rows == result.ledger.valid
    assert verified.rejected_rows == result.ledger.rejected_total
    assert len(verified.checks) == 6


def _write(spark, path, payments: list[dict], rejected: list[dict]) -> None:
    """A table shaped like the ingestion job's output, partitioned by topic."""
    rows = [(None, json.dumps(v).encode(), topic, 0, i)
            for topic, values in (("payments", payments), ("payments-rejected", rejected))
            for i, v in enumerate(values)]
    (spark.createDataFrame(rows, "key BINARY, value BINARY, topic STRING, partition INT, "
                                 "offset BIGINT").write.partitionBy("topic").parquet(str(path)))


def test_verify_catches_aborted_and_duplicate_records(spark, tmp_path):
    orders = generate_orders(60, seed=3)
    ledger = expected_ledger(orders)
    outputs = [process(o, "p1-0001") for o in orders]
    payments = [v for ok, v in outputs if ok]
    rejected = [v for ok, v in outputs if not ok]
    assert rejected  # the seed gives some invalid orders
    good = dict(ledger=ledger, aborted_attempts=["p1-0002"], committed_attempts=["p1-0001"],
                order_ids=[o.order_id for o in orders])

    # (The clean case passes: test_ingested_payments_match_the_ledger.)
    # One payment from an aborted attempt slipped in (a read_uncommitted ingestion).
    leaked = [*payments, {**payments[0], "attempt": "p1-0002"}]
    _write(spark, tmp_path / "leaked", leaked, rejected)
    bad = verify(spark, str(tmp_path / "leaked"), **good)
    assert not bad.passed
    assert {c.name for c in bad.failed()} == {
        "no record of an aborted transaction", "every record from a committed transaction",
        "no duplicate order_id", "every order ingested exactly once",
        "totals per account and currency equal the ledger"}

    # A rejection lost.
    _write(spark, tmp_path / "lost", payments, rejected[1:])
    lost = verify(spark, str(tmp_path / "lost"), **good)
    assert {c.name for c in lost.failed()} == {"every order ingested exactly once",
                                               "rejected orders as expected"}



def test_secured_demo_pipeline_and_spark_ingestion(tmp_path, spark):
    """``make demo SECURE=1``'s parts (spark_jobs/demo_security.py) with this session's
    Spark: SASL_SSL only, SCRAM users and ACLs; the processor as User:app with the
    transactional application's ACLs, Spark reading read_committed as User:spark, and
    User:mallory refused. Every check the demo prints must pass."""
    from txbroker.spark_jobs import demo
    from txbroker.spark_jobs.demo_security import LISTENER, SecureDemo

    secured = SecureDemo(tmp_path, CONFIG)
    broker = secured.broker.start()
    try:
        bootstrap = broker.bootstrap_for(LISTENER)
        secured.grant(bootstrap)
        result = run_pipeline(bootstrap, tmp_path, CONFIG, clients=secured.clients())
        assert result.crashes == 1 and result.attempts.aborted
        checks = [demo._count_logs(bootstrap, result, secured.client("spark")),
                  *secured.attacks(bootstrap)]
        verified = demo._ingest_and_verify(spark, bootstrap, tmp_path, result, "txbroker",
                                           secured.spark_options())
        failed = [c for c in checks + verified.checks if not c.passed]
        assert not failed and len(checks) == 4, failed
        assert verified.payments_rows == result.ledger.valid
    finally:
        broker.terminate()
