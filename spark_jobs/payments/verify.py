"""Prove the ingested payments with Spark: nothing aborted, nothing twice, totals right.

    python -m spark_jobs.payments.verify --table DIR --journal FILE [--orders N] [--seed S]

Reads the Parquet table written by the ingestion job (``spark_jobs/ingest.py``,
subscribed to ``payments,payments-rejected``, partitioned by topic) with
``spark.read.parquet`` (which honours the file sink's ``_spark_metadata``: only files
of committed micro-batches count), parses the JSON values with ``from_json`` and
checks:

- no record of an aborted transaction attempt (the processor's journal names them),
  and every record comes from an attempt the journal says was committed;
- no duplicate ``order_id``, and every generated order is there exactly once
  (as a payment or as a rejection);
- per account and currency: count, amount, fee and EUR amount equal the ledger
  computed from the generator's orders;
- the rejected orders, by reason, are the invalid ones.

Everything is computed by Spark over the files; only the small aggregates come back.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .orders import Ledger, LedgerEntry, expected_ledger, generate_orders
from .processor import PAYMENTS_TOPIC, REJECTED_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Both output topics' values: a payment has fee/fx_rate/amount_eur, a rejection a reason.
VALUE_SCHEMA = (
    "order_id STRING, account STRING, amount BIGINT, currency STRING, created STRING, "
    "status STRING, fee BIGINT, fx_rate STRING, amount_eur BIGINT, reason STRING, "
    "attempt STRING")


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class VerifyResult:
    payments_rows: int = 0
    rejected_rows: int = 0
    checks: list[Check] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return self.payments_rows + self.rejected_rows

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def report(self) -> str:
        lines = [f"  [{'ok' if c.passed else 'FAILED'}] {c.name}"
                 + (f": {c.detail}" if c.detail else "") for c in self.checks]
        return "\n".join(lines)


def read_values(spark: SparkSession, path: str, payments_topic: str = PAYMENTS_TOPIC,
                rejected_topic: str = REJECTED_TOPIC) -> DataFrame:
    """The ingested records of both topics with their JSON value parsed into columns,
    and ``kind``: "payment", "rejected" (or "other" for a record of another topic)."""
    from pyspark.sql import functions as F

    topic = F.col("topic")
    return (spark.read.parquet(path)
            .select(F.when(topic == payments_topic, "payment")
                    .when(topic == rejected_topic, "rejected").otherwise("other").alias("kind"),
                    F.from_json(F.col("value").cast("string"), VALUE_SCHEMA).alias("v"))
            .select("kind", "v.*"))


def verify(spark: SparkSession, path: str, *, ledger: Ledger,
           aborted_attempts: Iterable[str], committed_attempts: Iterable[str] | None = None,
           order_ids: Iterable[str] | None = None, payments_topic: str = PAYMENTS_TOPIC,
           rejected_topic: str = REJECTED_TOPIC) -> VerifyResult:
    """Check the ingested Parquet against the expected ledger and the journal.

    Two Spark jobs: counts per order_id summed up (duplicates, attempts, unknown ids),
    and a group-by for the per-account totals and the rejection reasons. The attempt
    ids (tens) go into the plan as ``isin`` literals; the generated order ids are a
    broadcast table joined to the per-order counts (thousands of literals in an ``IN``
    make the planner crawl)."""
    from pyspark.sql import functions as F

    aborted = sorted(set(aborted_attempts))
    committed = None if committed_attempts is None else sorted(set(committed_attempts))
    ids = None if order_ids is None else sorted(set(order_ids))
    rows = read_values(spark, path, payments_topic, rejected_topic).cache()
    try:
        expected = None if ids is None else spark.createDataFrame(
            [(i,) for i in ids], "order_id STRING").withColumn("generated", F.lit(True))
        stats = _row_stats(F, rows, aborted, committed, expected).first().asDict()
        groups = (rows.groupBy("kind", "account", "currency", "reason")
                  .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("amount"),
                       F.sum("fee").alias("fee"), F.sum("amount_eur").alias("amount_eur"))
                  .collect())
    finally:
        rows.unpersist()
    stats = {k: int(v or 0) for k, v in stats.items()}
    return _checks(stats, groups, ledger, aborted, committed, ids)


def _row_stats(F, rows: DataFrame, aborted: list[str], committed: list[str] | None,
               expected: DataFrame | None) -> DataFrame:
    """One row of counts. Grouping by order_id first, then summing, counts distinct
    ids and duplicates in one shuffle (``countDistinct`` next to other aggregates
    would make Spark expand the rows and shuffle more)."""
    def count_if(cond):
        return F.sum(F.when(cond, 1).otherwise(0))

    kind, status, attempt, order_id = (F.col(c) for c in ("kind", "status", "attempt",
                                                            "order_id"))
    no = F.lit(False)
    per_order = rows.groupBy(order_id).agg(
        F.count(F.lit(1)).alias("n"),
        count_if(kind == "payment").alias("payments"),
        count_if(kind == "rejected").alias("rejected"),
        count_if(kind == "other").alias("other"),
        count_if(attempt.isin(aborted) if aborted else no).alias("aborted"),
        count_if(~attempt.isin(committed) if committed is not None else no)
        .alias("uncommitted"),
        count_if(((kind == "payment") & (status != "accepted"))
                 | ((kind == "rejected") & (status != "rejected"))).alias("bad_status"))
    if expected is not None:
        per_order = per_order.join(F.broadcast(expected), "order_id", "left")
    else:
        per_order = per_order.withColumn("generated", F.lit(None).cast("boolean"))
    n, generated = F.col("n"), F.col("generated")
    return per_order.agg(
        *(F.sum(c).alias(c) for c in ("payments", "rejected", "other", "aborted",
                                       "uncommitted", "bad_status")),
        count_if(order_id.isNotNull()).alias("distinct_ids"),
        F.sum(F.when(order_id.isNull(), n).otherwise(0)).alias("unparsed"),
        # Generated orders seen, and rows of orders nobody generated.
        count_if(generated.isNotNull()).alias("known_ids"),
        F.sum(F.when(generated.isNull() & F.lit(expected is not None), n).otherwise(0))
        .alias("unknown"))


def _checks(stats: dict[str, int], groups: list, ledger: Ledger, aborted: list[str],
            committed: list[str] | None, ids: list[str] | None) -> VerifyResult:
    n_pay, n_rej = stats["payments"], stats["rejected"]
    result = VerifyResult(payments_rows=n_pay, rejected_rows=n_rej)
    total = n_pay + n_rej + stats["other"]  # "other": rows of a topic that is neither
    checks = result.checks

    checks.append(Check("no record of an aborted transaction", stats["aborted"] == 0,
                        f"{stats['aborted']} rows from the {len(aborted)} aborted attempts"))
    if committed is not None:
        checks.append(Check(
            "every record from a committed transaction", stats["uncommitted"] == 0,
            f"{len(committed)} committed attempts, {stats['uncommitted']} rows from others"))
    dupes = total - stats["distinct_ids"]
    checks.append(Check("no duplicate order_id", dupes == 0 and stats["unparsed"] == 0,
                        f"{total} rows, {dupes} duplicates"
                        + (f", {stats['unparsed']} unparsable" if stats["unparsed"] else "")))
    if ids is not None:
        missing = len(ids) - stats["known_ids"]
        ok = (missing == 0 and stats["unknown"] == 0 and stats["other"] == 0
              and total == len(ids) == ledger.orders)
        checks.append(Check(
            "every order ingested exactly once", ok,
            f"{ledger.orders} = {n_pay} payments + {n_rej} rejected" if ok
            else f"{missing} missing, {stats['unknown']} unknown, {stats['other']} of other "
                 f"topics, {total} rows for {ledger.orders} orders"))

    got: dict[tuple[str, str], LedgerEntry] = {}
    reasons: dict[str, int] = {}
    for g in groups:
        if g["kind"] == "payment":
            got[(g["account"], g["currency"])] = LedgerEntry(
                int(g["n"]), int(g["amount"] or 0), int(g["fee"] or 0),
                int(g["amount_eur"] or 0))
        else:
            reasons[g["reason"]] = reasons.get(g["reason"], 0) + int(g["n"])
    wrong = sorted(k for k in set(got) | set(ledger.accounts)
                   if got.get(k) != ledger.accounts.get(k))
    if not wrong:
        detail = f"{len(ledger.accounts)} pairs, EUR {ledger.amount_eur / 100:,.2f}"
    else:
        eur = sum(e.amount_eur for e in got.values())
        detail = (f"{len(wrong)} pairs differ, e.g. {wrong[0]}: got {got.get(wrong[0])}, "
                  f"expected {ledger.accounts.get(wrong[0])}; EUR {eur / 100:,.2f} vs "
                  f"{ledger.amount_eur / 100:,.2f}")
    checks.append(Check("totals per account and currency equal the ledger", not wrong, detail))

    ok = reasons == ledger.rejected and stats["bad_status"] == 0
    detail = (", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none") if ok \
        else f"got {reasons}, expected {ledger.rejected}, {stats['bad_status']} bad status"
    checks.append(Check("rejected orders as expected", ok, detail))
    return result


def main(argv: list[str] | None = None) -> int:
    from .journal import read_journal

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True,
                   help="the ingested Parquet table of payments and payments-rejected")
    p.add_argument("--journal", required=True, help="the processor's attempts journal")
    p.add_argument("--orders", type=int, default=2000)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    from txbroker.spark_jobs.session import spark_session

    orders = generate_orders(a.orders, a.seed)
    attempts = read_journal(a.journal)
    spark = spark_session("txbroker-payments-verify")
    try:
        result = verify(spark, a.table, ledger=expected_ledger(orders), aborted_attempts=attempts.not_committed,
                        committed_attempts=attempts.committed,
                        order_ids=[o.order_id for o in orders])
    finally:
        spark.stop()
    print(f"{result.rows} rows ({result.payments_rows} payments, {result.rejected_rows} "
          "rejected)")
    print(result.report())
    print("verification " + ("passed" if result.passed else "FAILED"))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
