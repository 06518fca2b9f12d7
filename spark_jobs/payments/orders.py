"""Payment orders: deterministic generation, validation and enrichment, the expected ledger.

Pure code, no Kafka and no Spark: the generator, the processor and the verification
all use it, and the unit tests pin it down with hand-computed values.

Amounts are integers in minor units (cents); fees and FX conversions are computed
with ``Decimal`` and rounded half-even to whole cents, so every total is exact and
Spark's ``sum`` over longs must equal the ledger to the cent.
"""

from __future__ import annotations

import datetime
import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

BASE_CURRENCY = "EUR"
# Fixed rates (units of EUR per unit of the currency), so the ledger is reproducible.
FX_TO_EUR: dict[str, Decimal] = {
    "EUR": Decimal("1"),
    "USD": Decimal("0.9215"),
    "GBP": Decimal("1.1690"),
    "CHF": Decimal("1.0412"),
    "SEK": Decimal("0.0871"),
}
# Currencies an order may carry that the processor does not know.
UNKNOWN_CURRENCIES = ("XBT", "ZZZ", "usd")
FEE_RATE = Decimal("0.014")  # 1.4 % of the amount ...
FEE_FIXED = 25  # ... plus 25 minor units, in the order's currency
MAX_AMOUNT = 1_000_000  # per-order limit in minor units (10,000.00)
ACCOUNTS = 40
_EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)

# Rejection reasons, in the order validate() checks them.
NON_POSITIVE_AMOUNT = "non_positive_amount"
UNKNOWN_CURRENCY = "unknown_currency"
OVER_LIMIT = "over_limit"
REASONS = (NON_POSITIVE_AMOUNT, UNKNOWN_CURRENCY, OVER_LIMIT)


@dataclass(frozen=True)
class Order:
    order_id: str
    account: str
    amount: int  # minor units; may be invalid (<= 0, over the limit)
    currency: str  # may be unknown
    created: str  # ISO 8601, UTC, milliseconds

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Order:
        d = json.loads(raw)
        return cls(order_id=d["order_id"], account=d["account"], amount=int(d["amount"]),
                   currency=d["currency"], created=d["created"])


def generate_orders(count: int, seed: int) -> list[Order]:
    """``count`` orders, the same list for the same seed; about 10 % are invalid."""
    rng = random.Random(seed)
    currencies = list(FX_TO_EUR)
    weights = [40, 30, 15, 10, 5]
    orders = []
    created_ms = 0
    for i in range(count):
        created_ms += rng.randint(1, 2000)
        account = f"acct-{rng.randrange(ACCOUNTS):03d}"
        currency = rng.choices(currencies, weights)[0]
        amount = rng.randint(100, 250_000)
        roll = rng.random()
        if roll < 0.04:
            amount = -amount if rng.random() < 0.8 else 0
        elif roll < 0.08:
            currency = rng.choice(UNKNOWN_CURRENCIES)
        elif roll < 0.10:
            amount = MAX_AMOUNT + rng.randint(1, 500_000)
        created = (_EPOCH + datetime.timedelta(milliseconds=created_ms))
        orders.append(Order(
            order_id=f"ord-{seed}-{i:06d}", account=account, amount=amount, currency=currency,
            created=created.isoformat(timespec="milliseconds").replace("+00:00", "Z")))
    return orders


def validate(order: Order) -> str | None:
    """The rejection reason, or None for a valid order."""
    if order.amount <= 0:
        return NON_POSITIVE_AMOUNT
    if order.currency not in FX_TO_EUR:
        return UNKNOWN_CURRENCY
    if order.amount > MAX_AMOUNT:
        return OVER_LIMIT
    return None


def _cents(value: Decimal) -> int:
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def fee(amount: int) -> int:
    """The processing fee in the order's currency, minor units."""
    return FEE_FIXED + _cents(amount * FEE_RATE)


def to_base(amount: int, currency: str) -> int:
    """``amount`` (minor units of ``currency``) in EUR cents."""
    return _cents(amount * FX_TO_EUR[currency])


def process(order: Order, attempt: str) -> tuple[bool, dict]:
    """(valid, output value) for one order: an enriched payment or a rejection.

    ``attempt`` names the transaction attempt that writes the output, so a reader can
    prove that no record of an aborted attempt reached it."""
    reason = validate(order)
    base = {"order_id": order.order_id, "account": order.account, "amount": order.amount,
            "currency": order.currency, "created": order.created}
    if reason is not None:
        return False, {**base, "status": "rejected", "reason": reason, "attempt": attempt}
    f = fee(order.amount)
    return True, {**base, "status": "accepted", "fee": f,
                  "fx_rate": str(FX_TO_EUR[order.currency]),
                  "amount_eur": to_base(order.amount, order.currency), "attempt": attempt}


@dataclass(frozen=True)
class LedgerEntry:
    """Valid payments of one account in one currency."""

    count: int = 0
    amount: int = 0  # minor units of the currency
    fee: int = 0
    amount_eur: int = 0

    def add(self, order: Order) -> LedgerEntry:
        return LedgerEntry(self.count + 1, self.amount + order.amount,
                           self.fee + fee(order.amount),
                           self.amount_eur + to_base(order.amount, order.currency))


@dataclass
class Ledger:
    """What the committed outputs must add up to, computed from the orders alone."""

    orders: int = 0
    accounts: dict[tuple[str, str], LedgerEntry] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> orders

    @property
    def valid(self) -> int:
        return sum(e.count for e in self.accounts.values())

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    @property
    def amount_eur(self) -> int:
        return sum(e.amount_eur for e in self.accounts.values())


def expected_ledger(orders: Iterable[Order]) -> Ledger:
    ledger = Ledger()
    reasons: Counter[str] = Counter()
    for order in orders:
        ledger.orders += 1
        reason = validate(order)
        if reason is not None:
            reasons[reason] += 1
            continue
        key = (order.account, order.currency)
        ledger.accounts[key] = ledger.accounts.get(key, LedgerEntry()).add(order)
    ledger.rejected = dict(sorted(reasons.items()))
    return ledger
