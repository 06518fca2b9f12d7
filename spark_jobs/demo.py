"""``make demo``: an exactly-once payments pipeline on txbroker, ingested and proven by Spark.

    python -m spark_jobs.demo [--orders N] [--seed S] [--keep DIR] [--source kafka] [-v]

1. starts the broker as a real process (``python -m broker serve``, embedded
   defaults, a temporary data directory);
2. runs the payments pipeline (``spark_jobs/payments``): the generator produces
   orders; the transactional processor validates and enriches them into
   ``payments`` / ``payments-rejected``, aborting every 4th transaction on purpose
   and SIGKILLing itself once mid-transaction; a restarted processor with the same
   transactional.id fences the zombie and finishes;
3. counts the payments log with a read_uncommitted and a read_committed consumer
   (the aborted records are there, and hidden);
4. ingests both output topics with Spark (``txbroker.spark_jobs.ingest``, the ``txbroker``
   source or, with ``--source kafka`` (``make demo SOURCE=kafka``), Spark's own Kafka
   connector; read_committed, ``availableNow``) into a Parquet table;
5. verifies the Parquet with Spark (``payments/verify.py``) and prints the checks;
6. stops the broker with SIGTERM. Exit code 0 only if every check passed.

``--secure`` (``make demo SECURE=1``) runs the same on a secured broker (docs/security.md):
a SASL_SSL listener only (throwaway CA and certificate, SCRAM-SHA-256 users), ACLs with
Kafka's StandardAuthorizer. Each part is its own principal with only the ACLs it needs —
``User:shop`` writes the orders, ``User:app`` (the processor) has the ACLs of "A
transactional application", ``User:spark`` reads the outputs — and ``User:mallory``,
authenticated but with no ACL, is shown to be refused.

The SparkSession (a JVM, several seconds) starts in a background thread while the
pipeline runs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from txbroker.spark_jobs.demo_security import LISTENER, SecureDemo
from txbroker.spark_jobs.demo_security import say as _say
from txbroker.spark_jobs.payments.pipeline import (
    PipelineConfig,
    PipelineResult,
    read_topic,
    run_pipeline,
)
from txbroker.spark_jobs.payments.verify import Check, VerifyResult, verify
from txbroker.testing import BrokerProcess

# The ingest job's two sources; kept here so that --help works without importing pyspark.
FORMATS = ("txbroker", "kafka")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _start_spark(log_path: Path) -> SparkSession:
    """A local SparkSession whose JVM writes its stderr to ``log_path``.

    The JVM (and the Python workers it starts) inherit file descriptor 2 when it is
    launched; pointing fd 2 at a file for that moment keeps the JVM's warnings out of
    the demo's output. Python's own stderr is restored right after; the log is shown
    if the demo fails."""
    from txbroker.spark_jobs.session import spark_session

    saved = os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 2)
        spark = spark_session("txbroker-demo")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)
    return spark


def run_demo(workdir: Path, config: PipelineConfig, verbose: bool = False,
             source: str = "txbroker", secure: bool = False) -> bool:
    started = time.monotonic()
    checks: list[Check] = []
    secured = SecureDemo(workdir, config) if secure else None
    # The plain demo also serves the web console (docs/console.md) on a free port.
    broker = secured.broker if secured else BrokerProcess(str(workdir / "data"),
                                                          {"admin.http.port": "0"})
    broker.start()
    bootstrap = broker.bootstrap_for(LISTENER) if secured else broker.bootstrap
    _say("broker", f"ready at {bootstrap} (data dir {broker.data_dir})")
    if not secured and broker.admin_url:
        _say("console", f"{broker.admin_url}/ (the pipeline's transactions, LSO and lag)")
    if secured:
        secured.grant(bootstrap)
    spark_log = workdir / "spark.log"
    pool = concurrent.futures.ThreadPoolExecutor(1)
    spark_future = pool.submit(_start_spark, spark_log)
    spark = None
    verified: VerifyResult | None = None
    try:
        result = run_pipeline(bootstrap, workdir, config, echo=print if verbose else None,
                              clients=secured.clients() if secured else None)
        _report_pipeline(result)
        reader = secured.client("spark") if secured else None
        checks.append(_count_logs(bootstrap, result, reader))
        if secured:
            checks.extend(secured.attacks(bootstrap))

        spark = spark_future.result()
        verified = _ingest_and_verify(spark, bootstrap, workdir, result, source,
                                      secured.spark_options() if secured else None)
        checks.extend(verified.checks)
    except BaseException:
        if spark_log.exists() and spark_log.stat().st_size:
            print("--- last lines of the Spark log ---", file=sys.stderr)
            print("".join(spark_log.read_text().splitlines(True)[-30:]), file=sys.stderr)
        raise
    finally:
        pool.shutdown(wait=True)  # a session still starting is stopped too
        if spark is None and spark_future.exception() is None:
            spark = spark_future.result()
        if spark is not None:
            spark.stop()
        if broker.running:
            rc = broker.terminate()
            checks.append(Check("broker stopped with SIGTERM", rc == 0, f"exit code {rc}"))
    print("\nverification")
    print(VerifyResult(checks=checks).report())
    passed = all(c.passed for c in checks) and verified is not None
    print(f"\ndemo {'passed' if passed else 'FAILED'} in {time.monotonic() - started:.0f}s")
    return passed


def _report_pipeline(r: PipelineResult) -> None:
    c, a = r.config, r.attempts
    _say("generator", f"{r.orders} orders (seed {c.seed}) into topic {c.orders_topic}, "
                      f"idempotent producer: {r.ledger.valid} valid, "
                      f"{r.ledger.rejected_total} invalid")
    deliberate = sum(1 for reason in a.aborted.values() if reason == "deliberate")
    _say("processor", f"{r.transactions_committed + r.transactions_aborted} transactions of "
                      f"up to {c.batch} orders: {r.transactions_committed} committed, "
                      f"{r.transactions_aborted} aborted")
    _say("", f"({deliberate} on purpose, {len(a.crashed)} left open by a SIGKILL "
             "mid-transaction and aborted")
    _say("", " when the restarted processor, same transactional.id, fenced the zombie)")
    _say("", f"processor crashes: {r.crashes}")


def _count_logs(bootstrap: str, r: PipelineResult,
                client: dict[str, str] | None = None) -> Check:
    c, a = r.config, r.attempts
    in_log = len(read_topic(bootstrap, c.payments_topic, committed=False, client=client))
    visible = len(read_topic(bootstrap, c.payments_topic, committed=True, client=client))
    _say("log", f"{c.payments_topic}: {in_log} records (read_uncommitted), "
                f"{in_log - visible} of them in aborted transactions")
    _say("", f"{visible} visible to read_committed")
    expected = a.uncommitted_records["payments"]
    # An abort after a client error may leave records the journal could not count.
    errors = any(reason.startswith("error") for reason in a.aborted.values())
    ok = visible == r.ledger.valid and (in_log - visible == expected
                                        or errors and in_log - visible >= expected)
    return Check("aborted records are in the log, hidden from read_committed", ok,
                 f"{in_log - visible} (the journal says {expected})")


def _ingest_and_verify(spark: SparkSession, bootstrap: str, workdir: Path,
                       r: PipelineResult, source: str,
                       options: dict[str, str] | None = None) -> VerifyResult:
    from txbroker.spark_jobs.ingest import ingest

    c = r.config
    table = str(workdir / "lake" / "payments")
    t0 = time.monotonic()
    # One streaming query subscribed to both topics (Spark's Kafka source syntax): the
    # table is partitioned by topic.
    ingested = ingest(spark, bootstrap_servers=bootstrap,
                      topic=f"{c.payments_topic},{c.rejected_topic}", output=table,
                      checkpoint=str(workdir / "checkpoints" / "payments"),
                      source_format=source, options=options)
    _say("spark", f"ingested {ingested.rows_written} rows of {c.payments_topic} and "
                  f"{c.rejected_topic} into Parquet in {time.monotonic() - t0:.1f}s")
    what = "txbroker source" if source == "txbroker" else "Spark's Kafka connector"
    over = f", {options['kafka.security.protocol']} as User:spark" if options else ""
    _say("", f"({what}, read_committed, trigger availableNow, checkpointed{over})")
    t0 = time.monotonic()
    result = verify(spark, table, ledger=r.ledger, aborted_attempts=r.aborted_attempts,
                    committed_attempts=r.attempts.committed, order_ids=r.order_ids,
                    payments_topic=c.payments_topic, rejected_topic=c.rejected_topic)
    _say("verify", f"Spark read {result.rows} rows back ({result.payments_rows} payments, "
                   f"{result.rejected_rows} rejected) and checked them in "
                   f"{time.monotonic() - t0:.1f}s")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--orders", type=int, default=PipelineConfig.orders)
    p.add_argument("--seed", type=int, default=PipelineConfig.seed)
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (data, Parquet)")
    p.add_argument("--source", choices=FORMATS, default="txbroker",
                   help="Spark source of the ingestion: txbroker (this package, default) or "
                        "kafka (Spark's connector, fetched by make spark-kafka-jars)")
    p.add_argument("--secure", action="store_true",
                   help="SASL_SSL with SCRAM users and ACLs (docs/security.md)")
    p.add_argument("-v", "--verbose", action="store_true", help="echo the processors' lines")
    a = p.parse_args(argv)
    from txbroker.spark_jobs.session import connector_jars

    if a.source == "kafka" and not connector_jars():
        p.error("--source kafka: Spark's Kafka connector was not fetched "
                "(run make spark-kafka-jars)")
    config = PipelineConfig(orders=a.orders, seed=a.seed)
    if a.keep:
        workdir = Path(a.keep)
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            p.error(f"--keep {workdir}: the directory must be empty")
        return 0 if run_demo(workdir, config, a.verbose, a.source, a.secure) else 1
    with tempfile.TemporaryDirectory(prefix="txbroker-demo-") as tmp:
        return 0 if run_demo(Path(tmp), config, a.verbose, a.source, a.secure) else 1


if __name__ == "__main__":
    sys.exit(main())
