"""The checker of a share-group worker pool (``txbroker chaos --share``): given the
input records and what the workers wrote (deliveries with their delivery counts,
ACCEPTs and the broker's answers to them), name every anomaly, with examples
(docs/testing-your-pipeline.md, "Share-group worker pools").

Pure: plain data in, a Report out; ``parse_history`` reads the workers' lines
(recipes/confluent_share_worker.py writes them).

Anomalies:
  lost                    an input never ACCEPTed by any worker (neither confirmed nor
                          sent without an answer) by the end of the drain; one
                          delivered up to the delivery count limit is archived instead,
                          as Kafka does (counted, not an anomaly)
  accepted-twice          two deliveries of one record each had their ACCEPT confirmed
  delivered-after-accept  a record delivered again after its ACCEPT was confirmed (a
                          higher delivery count than the accepted delivery's, or the same
                          count polled after the confirmation)
  unknown-record          a delivery the input log does not have at that place (its key
                          differs, or no record is there)
Not anomalies, counted: deliveries, redelivered records and the most deliveries of one,
ACCEPTs confirmed, failed (the broker refused them: the record comes back) and unknown.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .checker import InputRecord, Report

ANOMALIES = ("lost", "accepted-twice", "delivered-after-accept", "unknown-record")
CONFIRMED, FAILED, UNKNOWN = "confirmed", "failed", "unknown"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A record a worker polled: ``worker`` and ``seq`` name the delivery, ``at`` is
    when it was polled (wall clock)."""

    worker: str
    seq: int
    topic: str
    partition: int
    offset: int
    key: str | None
    count: int | None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Accept:
    """The ACCEPT of one delivery and what became of it: confirmed, failed, unknown
    (sent, no answer); ``at``: when that was known."""

    worker: str
    seq: int
    outcome: str
    at: float = 0.0
    error: str | None = None


def parse_history(lines: Iterable[str]) -> tuple[list[Delivery], list[Accept]]:
    """The deliveries and ACCEPTs of a worker's history lines. A line that is not JSON
    (the last one of a SIGKILLed worker) is skipped; an ACCEPT sent and never answered
    is unknown."""
    deliveries, accepts = [], []
    sent: dict[tuple[str, int], float] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        worker, at = entry.get("w", ""), entry.get("ts", 0.0)
        if "d" in entry:
            topic, partition, offset, key, count = entry["d"]
            deliveries.append(Delivery(worker, entry["s"], topic, partition, offset, key,
                                       count, at))
        elif "sent" in entry:
            sent.update({(worker, s): at for s in entry["sent"]})
        else:
            seqs, outcome = entry.get("done"), FAILED if entry.get("error") else CONFIRMED
            if seqs is None:
                seqs, outcome = entry.get("unknown", ()), UNKNOWN
            for s in seqs:
                if sent.pop((worker, s), None) is not None:
                    accepts.append(Accept(worker, s, outcome, at, entry.get("error")))
    accepts += [Accept(w, s, UNKNOWN, at, "no answer recorded (killed?)")
                for (w, s), at in sent.items()]
    return deliveries, accepts


def check_share(inputs: Iterable[InputRecord], deliveries: Iterable[Delivery],
                accepts: Iterable[Accept], *, delivery_count_limit: int) -> Report:
    """Check a share-group run. ``inputs``: the input log's records (id = key)."""
    report = Report(names=ANOMALIES)
    at_place = {(r.topic, r.partition, r.offset): r for r in inputs}
    by_id = {(d.worker, d.seq): d for d in deliveries}
    delivered: dict[tuple[str, int, int], list[Delivery]] = defaultdict(list)
    for d in by_id.values():
        place = (d.topic, d.partition, d.offset)
        record = at_place.get(place)
        if record is None or record.id != d.key:
            report.add("unknown-record", {"at": _pos(place), "key": d.key,
                                          "log": None if record is None else record.id})
        delivered[place].append(d)
    accepted: dict[tuple[str, int, int], list[tuple[Accept, Delivery]]] = defaultdict(list)
    outcomes: Counter[str] = Counter()
    for a in accepts:
        outcomes[a.outcome] += 1
        d = by_id.get((a.worker, a.seq))
        if d is not None and a.outcome != FAILED:
            accepted[(d.topic, d.partition, d.offset)].append((a, d))
    archived = _check_lost(report, at_place, delivered, accepted, delivery_count_limit)
    for place, pairs in accepted.items():
        confirmed = [(a, d) for a, d in pairs if a.outcome == CONFIRMED]
        if len(confirmed) > 1:
            report.add("accepted-twice", {"at": _pos(place), "by": [
                {"worker": d.worker, "delivery_count": d.count} for _, d in confirmed]})
        for a, d in confirmed[:1]:
            _check_after_accept(report, place, a, d, delivered[place])
    counts = Counter(len(ds) for ds in delivered.values())
    report.stats = {
        "inputs": len(at_place), "deliveries": sum(len(ds) for ds in delivered.values()),
        "redelivered": sum(n for times, n in counts.items() if times > 1),
        "most deliveries": max(counts, default=0),
        "accepts confirmed": outcomes[CONFIRMED], "accepts failed": outcomes[FAILED],
        "accepts unknown": outcomes[UNKNOWN], "archived": archived}
    return report


def _check_lost(report: Report, at_place: Mapping, delivered: Mapping, accepted: Mapping,
                limit: int) -> int:
    archived = 0
    for place, record in sorted(at_place.items()):
        if accepted.get(place):
            continue
        counts = [d.count for d in delivered.get(place, ()) if d.count is not None]
        if counts and max(counts) >= limit:
            archived += 1
            continue
        report.add("lost", {"id": record.id, "at": _pos(place),
                            "delivery_counts": sorted(counts)})
    return archived


def _check_after_accept(report: Report, place, accept: Accept, accepted: Delivery,
                        deliveries: list[Delivery]) -> None:
    for d in deliveries:
        if d is accepted or d.count is None or accepted.count is None:
            continue
        if d.count > accepted.count or (d.count == accepted.count and d.at > accept.at):
            report.add("delivered-after-accept", {
                "at": _pos(place), "accepted": {"worker": accepted.worker,
                                                "delivery_count": accepted.count},
                "then": {"worker": d.worker, "delivery_count": d.count,
                         "seconds_after_confirmed": round(d.at - accept.at, 3)}})


def _pos(place: tuple[str, int, int]) -> str:
    return f"{place[0]}-{place[1]}@{place[2]}"
