"""A Jepsen-style checker for consume-transform-produce pipelines: given the input
records, the output topic's log and what a read_committed reader of the output saw,
name every anomaly, with examples (docs/fault-injection.md, "Checking a pipeline").

Pure: plain data in, a Report out. Records are identified by a unique id (an input
record's key, by default; an output record carries the id of the input it came from).

Anomalies (Jepsen's Kafka workload names where it has one):
  lost-write         an input the pipeline consumed (its group's committed offset is past
                     it; without offsets: any input) is not in the committed output
  duplicate          an input appears at two places of the committed output
  G1a                an aborted read: the reader saw a record of an aborted transaction
  precommitted-read  the reader saw a record before its transaction committed (seen
                     before the commit started, or its transaction never decided)
  nonmonotonic       in one output partition, records from one input partition are out
                     of their input order
  offsets-behind     the output holds an input at or past the group's committed offset:
                     a restart from that offset emits it again
  unknown-id         an output record whose id no input has
Not anomalies, counted: ``unprocessed`` (inputs at or past the committed offset, not
in the output yet) and ``aborted`` (records of aborted transactions in the log).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ANOMALIES = ("lost-write", "duplicate", "G1a", "precommitted-read", "nonmonotonic",
             "offsets-behind", "unknown-id")
COMMITTED, ABORTED, OPEN, PLAIN = "committed", "aborted", "open", "plain"
EXAMPLES = 5  # examples kept per anomaly


@dataclass(frozen=True, slots=True)
class InputRecord:
    id: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record of the output topic's log, as written (aborted ones too), with the
    outcome of its transaction: committed, aborted, open (undecided) or plain
    (not transactional)."""

    id: str | None
    topic: str
    partition: int
    offset: int
    outcome: str = PLAIN


@dataclass(frozen=True, slots=True)
class Read:
    """A record a read_committed reader of the output saw; ``at``: when (any clock the
    ``commit_started`` times share), if known."""

    id: str | None
    topic: str
    partition: int
    offset: int
    at: float | None = None


@dataclass
class Report:
    anomalies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    names: tuple[str, ...] = ANOMALIES  # the anomalies text() lists, in its order

    @property
    def ok(self) -> bool:
        return not self.counts

    def add(self, name: str, example: dict[str, Any]) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        examples = self.anomalies.setdefault(name, [])
        if len(examples) < EXAMPLES:
            examples.append(example)

    def text(self) -> str:
        lines = [", ".join(f"{k} {v}" for k, v in self.stats.items())]
        if self.ok:
            lines.append("no anomalies")
        for name in self.names:
            if name in self.counts:
                lines.append(f"{name}: {self.counts[name]}")
                lines += [f"    {example}" for example in self.anomalies[name]]
        return "\n".join(lines)


def check(inputs: Iterable[InputRecord], log: Iterable[LogRecord], reads: Iterable[Read], *,
          group_offsets: Mapping[tuple[str, int], int] | None = None,
          commit_started: Mapping[str, float] | None = None,
          aborted_inputs: Iterable[str] = (), check_order: bool = True) -> Report:
    """Check a run. ``log``: the output topic's records (aborted ones too) with their
    outcomes; ``reads``: what a read_committed reader saw (possibly while the run went
    on); ``group_offsets``: the pipeline group's committed offsets on the input topic
    ({(topic, partition): offset}); ``commit_started``: per output id, when the
    transaction that wrote it started to commit; ``aborted_inputs``: ids of input
    records written in aborted transactions (output from them is a G1a: the pipeline
    read them); ``check_order``: whether the pipeline promises per-partition order."""
    report = Report()
    by_id = {}
    for record in inputs:
        by_id[record.id] = record
    outcome = {(r.topic, r.partition, r.offset): r.outcome for r in log}
    aborted = set(aborted_inputs)
    seen: dict[tuple[str, int, int], Read] = {}
    for read in reads:  # a reader that re-reads a position saw it once
        seen.setdefault((read.topic, read.partition, read.offset), read)
    report.stats = {"inputs": len(by_id), "log": len(outcome), "reads": len(seen),
                    "aborted": sum(1 for o in outcome.values() if o == ABORTED)}

    places: dict[str, list[Read]] = defaultdict(list)
    for pos, read in sorted(seen.items()):
        state = outcome.get(pos)
        if state == ABORTED:
            report.add("G1a", {"id": read.id, "at": _pos(read)})
            continue
        if state == OPEN:
            report.add("precommitted-read", {"id": read.id, "at": _pos(read),
                                             "why": "its transaction never committed"})
            continue
        started = (commit_started or {}).get(read.id) if read.id is not None else None
        if read.at is not None and started is not None and read.at < started:
            report.add("precommitted-read", {"id": read.id, "at": _pos(read),
                                             "why": f"seen {started - read.at:.3f}s before "
                                                    f"its commit started"})
        if read.id in aborted:
            report.add("G1a", {"id": read.id, "at": _pos(read),
                               "why": "its input was written in an aborted transaction"})
            continue
        if read.id is None or read.id not in by_id:
            report.add("unknown-id", {"id": read.id, "at": _pos(read)})
            continue
        places[read.id].append(read)

    for rid, reads_of in places.items():
        if len(reads_of) > 1:
            report.add("duplicate", {"id": rid, "at": [_pos(r) for r in reads_of]})
    _check_inputs(report, by_id, places, group_offsets)
    if check_order:
        _check_order(report, by_id, places)
    return report


def _check_inputs(report: Report, by_id: Mapping[str, InputRecord],
                  places: Mapping[str, list[Read]],
                  group_offsets: Mapping[tuple[str, int], int] | None) -> None:
    unprocessed = 0
    for rid, record in by_id.items():
        committed = None if group_offsets is None else group_offsets.get(
            (record.topic, record.partition), 0)
        consumed = committed is None or record.offset < committed
        if rid not in places:
            if consumed:
                example = {"id": rid, "input": _pos(record)}
                if committed is not None:
                    example["group_offset"] = committed
                report.add("lost-write", example)
            else:
                unprocessed += 1
        elif not consumed:
            report.add("offsets-behind", {"id": rid, "input": _pos(record),
                                          "group_offset": committed,
                                          "output": [_pos(r) for r in places[rid]]})
    report.stats["unprocessed"] = unprocessed


def _check_order(report: Report, by_id: Mapping[str, InputRecord],
                 places: Mapping[str, list[Read]]) -> None:
    """Per output partition, the records of each input partition in input order (the
    first place of each: later copies are duplicates, reported as such)."""
    last: dict[tuple[str, int, str, int], tuple[int, Read]] = {}
    ordered = sorted((reads[0] for reads in places.values()),
                     key=lambda r: (r.topic, r.partition, r.offset))
    for read in ordered:
        source = by_id[read.id]
        key = (read.topic, read.partition, source.topic, source.partition)
        previous = last.get(key)
        if previous is not None and source.offset < previous[0]:
            report.add("nonmonotonic", {
                "output": f"{read.topic}-{read.partition}",
                "input": f"{source.topic}-{source.partition}",
                "after": {"id": previous[1].id, "input_offset": previous[0],
                          "at": previous[1].offset},
                "then": {"id": read.id, "input_offset": source.offset, "at": read.offset}})
        if previous is None or source.offset > previous[0]:
            last[key] = (source.offset, read)


def _pos(record: InputRecord | Read | LogRecord) -> str:
    return f"{record.topic}-{record.partition}@{record.offset}"


def transaction_outcomes(batches: Iterable[tuple[int, int, int, bool, str | None]],
                         ) -> dict[int, str]:
    """Outcome per offset from a partition's batches in log order, as a read_committed
    consumer decides it: ``(first offset, last offset, producer id, transactional,
    marker)``, marker "COMMIT"/"ABORT" for a control batch (None for data). A
    transactional batch belongs to its producer's next marker; none yet: open."""
    out: dict[int, str] = {}
    pending: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for first, last, producer_id, transactional, marker in batches:
        if marker is not None:
            state = COMMITTED if marker == "COMMIT" else ABORTED
            for lo, hi in pending.pop(producer_id, ()):
                for offset in range(lo, hi + 1):
                    out[offset] = state
        elif transactional:
            pending[producer_id].append((first, last))
        else:
            for offset in range(first, last + 1):
                out[offset] = PLAIN
    for ranges in pending.values():
        for lo, hi in ranges:
            for offset in range(lo, hi + 1):
                out[offset] = OPEN
    return out
