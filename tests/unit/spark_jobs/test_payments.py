"""The sample payments pipeline's pure logic: deterministic orders, validation,
enrichment (fee, FX with half-even rounding), the expected ledger, the journal."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from txbroker.spark_jobs.payments import orders as o
from txbroker.spark_jobs.payments.journal import ABORTED, COMMITTED, CRASHED, Journal, read_journal
from txbroker.spark_jobs.payments.orders import (
    Order,
    expected_ledger,
    generate_orders,
    process,
    validate,
)


def order(amount: int = 10_000, currency: str = "USD", account: str = "acct-001",
          order_id: str = "ord-1") -> Order:
    return Order(order_id, account, amount, currency, "2025-01-01T00:00:01.000Z")


def test_generation_is_deterministic_per_seed():
    a, b = generate_orders(500, seed=3), generate_orders(500, seed=3)
    assert a == b
    assert generate_orders(500, seed=4) != a
    assert len({x.order_id for x in a}) == 500
    assert a[0].order_id == "ord-3-000000"
    # Timestamps increase, so "created" orders the orders.
    assert [x.created for x in a] == sorted(x.created for x in a)


def test_generation_mixes_in_every_kind_of_invalid_order():
    orders = generate_orders(2000, seed=7)
    reasons = [validate(x) for x in orders]
    invalid = [r for r in reasons if r is not None]
    assert set(invalid) == set(o.REASONS)
    assert 0.05 < len(invalid) / len(orders) < 0.15
    assert {x.currency for x in orders} >= set(o.FX_TO_EUR)


@pytest.mark.parametrize(("amount", "currency", "reason"), [
    (100, "EUR", None),
    (o.MAX_AMOUNT, "SEK", None),
    (0, "EUR", o.NON_POSITIVE_AMOUNT),
    (-5, "EUR", o.NON_POSITIVE_AMOUNT),
    (-5, "XBT", o.NON_POSITIVE_AMOUNT),  # the amount is checked first
    (500, "XBT", o.UNKNOWN_CURRENCY),
    (500, "usd", o.UNKNOWN_CURRENCY),  # codes are case-sensitive
    (o.MAX_AMOUNT + 1, "XBT", o.UNKNOWN_CURRENCY),
    (o.MAX_AMOUNT + 1, "USD", o.OVER_LIMIT),
])
def test_validate(amount, currency, reason):
    assert validate(order(amount, currency)) == reason


@pytest.mark.parametrize(("amount", "expected"), [
    (10_000, 25 + 140),
    (1_250, 25 + 18),  # 17.5 rounds half to even: 18
    (1_750, 25 + 24),  # 24.5 rounds half to even: 24
    (100, 25 + 1),  # 1.4
])
def test_fee_rounds_half_even(amount, expected):
    assert o.fee(amount) == expected


@pytest.mark.parametrize(("amount", "currency", "eur"), [
    (10_000, "EUR", 10_000),
    (10_000, "USD", 9_215),
    (12_345, "SEK", 1_075),  # 1075.2495
    (50, "GBP", 58),  # 58.45
    (250, "CHF", 260),  # 260.3
])
def test_conversion_to_eur(amount, currency, eur):
    assert o.to_base(amount, currency) == eur


def test_process_enriches_valid_orders_and_rejects_invalid_ones():
    valid, value = process(order(10_000, "USD"), "p1-0001")
    assert valid
    assert value == {"order_id": "ord-1", "account": "acct-001", "amount": 10_000,
                     "currency": "USD", "created": "2025-01-01T00:00:01.000Z",
                     "status": "accepted", "fee": 165, "fx_rate": "0.9215",
                     "amount_eur": 9_215, "attempt": "p1-0001"}
    valid, value = process(order(-1, "USD"), "p1-0002")
    assert not valid
    assert value["status"] == "rejected" and value["reason"] == o.NON_POSITIVE_AMOUNT
    assert value["attempt"] == "p1-0002" and "fee" not in value


def test_order_json_roundtrip():
    x = generate_orders(1, seed=1)[0]
    assert Order.from_json(x.to_json()) == x
    assert set(json.loads(x.to_json())) == {"order_id", "account", "amount", "currency",
                                            "created"}


def test_expected_ledger_by_hand():
    orders = [order(10_000, "USD", "a", "1"), order(1_250, "USD", "a", "2"),
              order(10_000, "EUR", "a", "3"), order(200, "EUR", "b", "4"),
              order(-1, "EUR", "b", "5"), order(7, "XBT", "b", "6"),
              order(o.MAX_AMOUNT + 1, "EUR", "b", "7"), order(0, "GBP", "c", "8")]
    ledger = expected_ledger(orders)
    assert ledger.orders == 8
    assert ledger.accounts == {
        ("a", "USD"): o.LedgerEntry(2, 11_250, 165 + 43, 9_215 + 1_152),  # 1151.875
        ("a", "EUR"): o.LedgerEntry(1, 10_000, 165, 10_000),
        ("b", "EUR"): o.LedgerEntry(1, 200, 25 + 3, 200),  # fee 2.8 -> 3
    }
    assert ledger.rejected == {o.NON_POSITIVE_AMOUNT: 2, o.OVER_LIMIT: 1,
                               o.UNKNOWN_CURRENCY: 1}
    assert ledger.valid == 4 and ledger.rejected_total == 4
    assert ledger.amount_eur == 9_215 + 1_152 + 10_000 + 200


def test_ledger_agrees_with_the_processor_output():
    """Summing what process() emits gives the ledger: both views of one truth."""
    orders = generate_orders(1000, seed=11)
    ledger = expected_ledger(orders)
    sums: dict[tuple[str, str], list[int]] = {}
    for x in orders:
        valid, v = process(x, "a")
        if valid:
            s = sums.setdefault((v["account"], v["currency"]), [0, 0, 0, 0])
            s[0] += 1
            s[1] += v["amount"]
            s[2] += v["fee"]
            s[3] += v["amount_eur"]
            # The EUR amount is the rounded product of amount and the published rate.
            assert abs(Decimal(v["amount"]) * Decimal(v["fx_rate"]) - v["amount_eur"]) <= \
                Decimal("0.5")
    assert {k: o.LedgerEntry(*s) for k, s in sums.items()} == ledger.accounts
    assert ledger.valid + ledger.rejected_total == 1000


def test_journal_roundtrip(tmp_path):
    j = Journal(tmp_path / "attempts.jsonl")
    j.record(COMMITTED, "p1-0001", payments=9, rejected=1)
    j.record(ABORTED, "p1-0002", reason="deliberate", payments=10, rejected=0)
    j.record(CRASHED, "p1-0003", payments=4, rejected=1)
    j.record(COMMITTED, "p2-0001", payments=8, rejected=2)
    got = read_journal(tmp_path / "attempts.jsonl")
    assert got.committed == ["p1-0001", "p2-0001"]
    assert got.aborted == {"p1-0002": "deliberate"}
    assert got.crashed == ["p1-0003"]
    assert got.not_committed == {"p1-0002", "p1-0003"}
    assert got.committed_orders == 20
    assert got.uncommitted_records == {"payments": 14, "rejected": 1}
    assert read_journal(tmp_path / "missing.jsonl").committed == []
