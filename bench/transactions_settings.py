"""Settings of the transaction benchmark (``python -m bench.transactions``): its
options, constants, client configurations, targets and the error of a failed phase.

Why a module of its own: the client workers (transactions_workers.py), the scenarios
(transactions_scenarios.py), the report (transactions_report.py) and the command
(transactions.py) all read them; here they import them without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import clients
from .brokers import KAFKA_FLUSH_BROKER

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
BROKERS = ("txbroker", KAFKA_FLUSH_BROKER, "tansu")
PARTITIONS = clients.PARTITIONS
COMMITTED, ABORTED = b"C", b"A"  # first byte of every value in the consume topic
FILL_PRODUCERS = 4
BROKER_CODE = ("protocol", "storage", "coordinator", "broker")
WORKER_LIFETIME = 3600.0  # a worker exits if it hears nothing for this long

TARGETS = {
    "txn_per_s_8p_10r": ("rate-8p-10r", "txn_per_s", ">=", 1000.0),
    "commit_p99_ms_1p_10r": ("rate-1p-10r", "commit_p99_ms", "<=", 10.0),
    "cost_at_100ms": ("cost", "cost", "<=", 0.10),
}

# Client defaults, except the log level: transactional.id implies idempotence and
# acks=all; linger.ms stays at its default (5 ms; commit_transaction() flushes anyway).
TXN_PRODUCER: dict[str, Any] = {"log_level": 3}
# The cost scenario uses the throughput benchmark's producer settings for both modes,
# except a 32 MB local queue (the Java client's buffer.memory default) instead of
# 256 MB: the producer is then paced by the broker, and a slice does not end with
# a second or more of draining a full queue (which made the cost swing by +-20%).
COST_PRODUCER: dict[str, Any] = clients.CONFLUENT_PRODUCER | {
    "queue.buffering.max.kbytes": 32 * 1024}
CONSUMER: dict[str, Any] = dict(clients.CONFLUENT_CONSUMER)


@dataclass
class Options:
    runs: int = 3
    producers: Sequence[int] = (1, 8)
    records: Sequence[int] = (1, 10, 100)
    rate_seconds: float = 3.0
    rate_max_txns: int = 200_000  # per producer and phase
    warmup_txns: int = 3
    fill_txns: int = 75  # per fill producer
    fill_records: int = 1000
    reads: int = 3  # full reads of the consume topic per isolation level and run
    abort_every: int = 10
    cost_seconds: float = 6.0  # per producer: 2 x 6 s in all
    cost_slices: int = 8  # per producer
    cost_max_messages: int = 20_000_000
    commit_interval: float = 0.1
    value_size: int = 1024
    phase_timeout: float = 60.0
    brokers: Sequence[str] = BROKERS
    out: Path = DEFAULT_OUT
    txbroker_overrides: dict[str, str] = field(default_factory=dict)
    wait_idle: float = 0.0


class PhaseError(RuntimeError):
    pass
