"""``txbroker chaos --share`` / ``txbroker.chaos.run_share(...)``: a share-group worker
pool (KIP-932) under fire, then checked (docs/testing-your-pipeline.md, "Share-group
worker pools").

A broker process is started with share groups on (``share.version`` 1, a new group
reading from the earliest offset, short sessions so that a killed worker's records
come back soon), the input topic created and fed with records keyed in-N (run.py's
Feeder: idempotent, acks=all). ``instances`` worker processes share the group, each
writing its deliveries and ACCEPTs into TXBROKER_HISTORY
(recipes/confluent_share_worker.py). For ``duration`` seconds workers are SIGKILLed,
the broker crashed, made to lose power once a member's acknowledgements are durable
and not yet answered (the ``after_share_acknowledge_durable`` point), restarted
cleanly, hung, and request faults injected. Then, faults off, the drain: the run waits
until every input record has an ACCEPT (or was delivered up to the delivery count
limit: archived) and the group's start offsets are at the input's
end (no progress for ``stall_timeout`` is a stall), and checks the histories
(share_checker.py).
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..broker_process import BrokerProcess
from . import events
from .history import read_log, share_start_offsets
from .mapping import inputs_of
from .run import (
    ChaosReport,
    Feeder,
    _create_topics,
    calm,
    supervise,
    timeline,
    under_fire,
)
from .share_checker import FAILED, Accept, Delivery, check_share, parse_history
from .supervisor import Instances

DELIVERY_COUNT_LIMIT = 10  # Kafka's greatest: a record archived by the faults is rare
SHARE_BROKER_CONFIG = {
    "txbroker.share.version": "1", "txbroker.share.auto.offset.reset": "earliest",
    # A SIGKILLed worker's records come back once its member is gone (6 s) or their
    # locks expire (10 s), not after Kafka's 45 s and 30 s (the floors lowered with them,
    # as Kafka requires the broker's values within them).
    "group.share.session.timeout.ms": "6000", "group.share.min.session.timeout.ms": "6000",
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.record.lock.duration.ms": "10000",
    "group.share.min.record.lock.duration.ms": "10000",
    "group.share.delivery.count.limit": str(DELIVERY_COUNT_LIMIT)}
# Power losses: at the share point (acknowledgements durable, not answered).
SHARE_POWER_POINTS = ("after_share_acknowledge_durable",)
# Request faults a share run draws from, by profile.
SHARE_FAULT_PROFILES: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "default": [
        {"api": "ShareFetch", "drop": True},
        {"api": "ShareAcknowledge", "drop": True},
        {"api": "ShareFetch", "close": True},
        {"api": "ShareGroupHeartbeat", "error": "NOT_COORDINATOR"},
        {"api": "ShareGroupHeartbeat", "error": "COORDINATOR_LOAD_IN_PROGRESS"},
        {"api": "*", "delay_ms": 300},
    ],
    "lost_answers": [
        {"api": "ShareFetch", "drop": True},
        {"api": "ShareAcknowledge", "drop": True},
    ],
}


def run_share(command: Sequence[str], *, input: str, instances: int = 3,
              duration: float = 60, records: int = 2000, partitions: int = 2,
              group: str = "chaos-workers", interval: float = 2.0,
              broker_crashes: bool = True, power_loss: bool = True, faults: str = "default",
              stall_timeout: float = 60, seed: int | None = None,
              data_dir: str | None = None, log=print, instance_kills: bool = True,
              clean_restarts: bool = True, hangs: bool = True,
              zombies: bool = True) -> ChaosReport:
    """Run ``command`` as ``instances`` share-group workers under fire; a ChaosReport
    (its ``check`` from share_checker.py)."""
    if faults not in SHARE_FAULT_PROFILES:
        raise ValueError(f"unknown fault profile {faults!r} ({', '.join(SHARE_FAULT_PROFILES)})")
    rng = random.Random(seed)
    strikes = events.strikes(instance_kills=instance_kills, broker_crashes=broker_crashes,
                             power_loss=power_loss, faults=bool(SHARE_FAULT_PROFILES[faults]),
                             clean_restarts=clean_restarts, hangs=hangs, zombies=zombies)
    work = Path(data_dir or tempfile.mkdtemp(prefix="txbroker-chaos-share-"))
    histories = work / "share-history"
    broker = BrokerProcess(str(work / "broker"), {"admin.http.port": "0",
                                                  **SHARE_BROKER_CONFIG})
    broker.start()
    started = time.monotonic()
    report = ChaosReport(None)
    event = timeline(report, started, log)
    pool = Instances(command, instances, {
        "TXBROKER_BOOTSTRAP": broker.bootstrap, "TXBROKER_INPUT": input,
        "TXBROKER_GROUP": group, "TXBROKER_HISTORY": str(histories)}, work)
    try:
        _create_topics(broker.bootstrap, (input,), partitions)
        feeder = Feeder(broker.bootstrap, input, records, duration * 0.8)
        log(f"feeding {records} records to {input} over {duration * 0.8:.0f}s; "
            f"{instances} worker(s) of share group {group}: {' '.join(command)}")
        feeder.start()
        pool.start_all()
        under_fire(rng, broker, pool, event, strikes, SHARE_FAULT_PROFILES[faults],
                   started + duration, interval, SHARE_POWER_POINTS)
        calm(broker, event)
        feeder.join()
        for failure in feeder.restarts:
            event(f"feeder restart: {failure}")
        written = inputs_of(read_log(broker.bootstrap, input))
        report.stall = _drain(broker, pool, histories, group, input, partitions,
                              written.ends, {r.id for r in written.records}, stall_timeout,
                              event)
        pool.stop()
        deliveries, accepts = parse_history(_lines(histories))
        report.check = check_share(written.records, deliveries, accepts,
                                   delivery_count_limit=DELIVERY_COUNT_LIMIT)
        for rid in sorted(feeder.acknowledged - {r.id for r in written.records}):
            report.check.add("lost", {"id": rid, "input": "acknowledged to the feeder, "
                                                          "not in the input log"})
        report.records = len(written.records)
        report.seconds = time.monotonic() - started
        return report
    finally:
        pool.stop()
        if broker.running:
            broker.terminate()
        (work / "broker.log").write_text(broker.log_text())


def _lines(folder: Path) -> list[str]:
    return [line for path in sorted(folder.glob("worker-*.jsonl"))
            for line in path.read_text(errors="replace").splitlines()]


def settled(deliveries: Sequence[Delivery], accepts: Sequence[Accept],
            delivery_count_limit: int) -> set[str | None]:
    """The input keys the drain waits for no more: ACCEPTed (confirmed or without an
    answer), or delivered up to the limit (archived, never ACCEPTed: the checker tells
    it from a lost one the same way)."""
    key_of = {(d.worker, d.seq): d.key for d in deliveries}
    done = {key_of.get((a.worker, a.seq)) for a in accepts if a.outcome != FAILED}
    return done | {d.key for d in deliveries if (d.count or 0) >= delivery_count_limit}


def _drain(broker: BrokerProcess, pool: Instances, histories: Path, group: str, topic: str,
           partitions: int, ends: dict[tuple[str, int], int], ids: set[str],
           stall_timeout: float, event) -> str | None:
    """Wait until every input has an ACCEPT in the histories (confirmed or without an
    answer) or was delivered up to the delivery count limit, and the group's start offsets reach the input's end (the broker holds
    nothing undecided: an ACCEPT without an answer that failed would keep one back);
    the stall's reason if the accepted count stops growing for ``stall_timeout``."""
    last, last_change = None, time.monotonic()
    while True:
        supervise(broker, pool, event)
        deliveries, accepts = parse_history(_lines(histories))
        done = settled(deliveries, accepts, DELIVERY_COUNT_LIMIT)
        try:
            starts = share_start_offsets(broker.bootstrap, group, topic, partitions)
        except (OSError, RuntimeError):  # restarting: no news is no progress
            starts = {}
        behind = {f"{t}-{p}": f"{starts.get(p, -1)}/{end}" for (t, p), end in ends.items()
                  if starts.get(p, -1) < end}
        if ids <= done and not behind and not pool.zombies:
            event("drained: every input ACCEPTed, the group's start offsets at the end")
            return None
        progress = (len(ids & done), sum(starts.values()))
        if progress != last:
            last, last_change = progress, time.monotonic()
        elif time.monotonic() - last_change > stall_timeout:
            return (f"no progress for {stall_timeout:.0f}s: {len(ids & done)}/{len(ids)} "
                    f"inputs ACCEPTed; share-group start offsets behind the end {behind}; "
                    f"workers alive {sum(p.poll() is None for p in pool.procs.values())}"
                    f"/{pool.count}")
        time.sleep(0.5)
