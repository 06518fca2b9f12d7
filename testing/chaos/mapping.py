"""Which input an output record came from (``--mapping``), and so what the checker
calls each record: an id shared by an input record and every output record made from
it.

- ``key`` (the default): an input's id is its key, an output record names its input by
  its key (the pipeline keeps the input key);
- ``header:NAME``: an input's id is its place, ``topic-partition-offset``; an output
  record names its input in header NAME, as ``topic-partition-offset`` (``@`` or ``:``
  also accepted as separators, e.g. ``orders-1@42``);
- ``python:module:function`` (or a callable, from Python): ``function(record)`` is
  called with every input record and every output record (a ChaosRecord:
  ``record.topic`` tells which) and returns the input's id: an input record's own id,
  or the id of the input an output record came from (None: no id).
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .checker import ABORTED, OPEN, InputRecord, LogRecord


@dataclass(frozen=True, slots=True)
class ChaosRecord:
    """A record of the input or the output topic, as a mapping sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


IdOf = Callable[[ChaosRecord], "str | None"]


@dataclass(frozen=True)
class Mapping:
    name: str
    input_id: IdOf
    output_id: IdOf


def key_id(record: ChaosRecord) -> str | None:
    return None if record.key is None else record.key.decode(errors="replace")


def place_id(record: ChaosRecord) -> str:
    return f"{record.topic}-{record.partition}-{record.offset}"


_PLACE = re.compile(r"(.+)[-@:](\d+)[-@:](\d+)")


def _header_id(name: str) -> IdOf:
    def output_id(record: ChaosRecord) -> str | None:
        for key, value in record.headers:
            if key == name and value is not None:
                text = value.decode(errors="replace").strip()
                m = _PLACE.fullmatch(text)
                return f"{m[1]}-{int(m[2])}-{int(m[3])}" if m else text
        return None

    return output_id


def parse_mapping(spec: str | IdOf | Mapping = "key") -> Mapping:
    """A Mapping from ``key``, ``header:NAME``, ``python:module:function`` or a callable;
    ValueError (with what is wrong) for anything else."""
    if isinstance(spec, Mapping):
        return spec
    if callable(spec):
        name = getattr(spec, "__qualname__", repr(spec))
        return Mapping(f"python:{name}", spec, spec)
    if spec == "key":
        return Mapping("key", key_id, key_id)
    kind, _, rest = spec.partition(":")
    if kind == "header" and rest:
        return Mapping(spec, place_id, _header_id(rest))
    if kind == "python":
        module, _, function = rest.rpartition(":")
        if not module or not function:
            raise ValueError(f"mapping {spec!r}: python:MODULE:FUNCTION expected")
        try:
            found = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"mapping {spec!r}: {e}") from None
        if not callable(found):
            raise ValueError(f"mapping {spec!r}: {module}.{function} is not callable")
        return Mapping(spec, found, found)
    raise ValueError(f"mapping {spec!r}: key, header:NAME or python:MODULE:FUNCTION expected")


@dataclass
class Inputs:
    """The input topic's log, as the checker needs it: ``records`` (committed or not
    transactional, with an id), ``aborted`` (ids of records of aborted transactions:
    output from them is a G1a), ``repeated`` (ids more than one input has: the
    mapping cannot tell those inputs apart) and ``ends`` (per partition, one past the
    last input: where the group's committed offset must get)."""

    records: list[InputRecord]
    aborted: set[str]
    repeated: dict[str, int]
    ends: dict[tuple[str, int], int]


def inputs_of(log: Iterable[LogRecord]) -> Inputs:
    records, aborted = [], set()
    ends: dict[tuple[str, int], int] = {}
    for r in log:
        if r.id is None or r.outcome == OPEN:
            continue
        if r.outcome == ABORTED:
            aborted.add(r.id)
        else:
            records.append(InputRecord(r.id, r.topic, r.partition, r.offset))
            tp = (r.topic, r.partition)
            ends[tp] = max(ends.get(tp, 0), r.offset + 1)
    counts = Counter(r.id for r in records)
    # An id written again after its transaction aborted (a retried batch) is an input.
    return Inputs(records, aborted - counts.keys(),
                  {i: n for i, n in counts.items() if n > 1}, ends)
