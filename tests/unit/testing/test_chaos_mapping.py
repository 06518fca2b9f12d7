"""``txbroker chaos --mapping``: each mapping names inputs and outputs so that the
checker catches a planted anomaly through it, and bad specs fail before a run
(testing/chaos/mapping.py)."""

from __future__ import annotations

import json

import pytest
from txbroker.testing.chaos.checker import ABORTED, COMMITTED, LogRecord, Read, check
from txbroker.testing.chaos.mapping import ChaosRecord, inputs_of, parse_mapping
from txbroker.testing.chaos.recipes.orders import order_id

from txbroker.cli import main

N = 4  # committed inputs per input partition


def order(record: ChaosRecord) -> str | None:
    """A python: mapping (this module's): the order id in the JSON value."""
    return json.loads(record.value)["order"] if record.value else None


def _inputs() -> list[tuple[ChaosRecord, str]]:
    """Two input partitions: an aborted record first, then N committed ones. Keys
    are unique, values carry the order id."""
    out = []
    for p in (0, 1):
        out.append((ChaosRecord("orders", p, 0, f"void-{p}".encode(),
                                json.dumps({"order": f"void-{p}"}).encode()), ABORTED))
        for k in range(N):
            out.append((ChaosRecord("orders", p, k + 1, f"o{p}-{k}".encode(),
                                    json.dumps({"order": f"o{p}-{k}"}).encode()), COMMITTED))
    return out


def _output(source: ChaosRecord, offset: int) -> ChaosRecord:
    """What the pipeline makes of an input: same partition, key and value, and a
    header naming the input's place."""
    place = f"{source.topic}-{source.partition}-{source.offset}".encode()
    return ChaosRecord("payments", source.partition, offset, source.key, source.value,
                       (("trace", b"x"), ("source", place)))


def _pipeline(sources: list[ChaosRecord]) -> list[ChaosRecord]:
    offsets = {0: 0, 1: 0}
    out = []
    for source in sources:
        out.append(_output(source, offsets[source.partition]))
        offsets[source.partition] += 1
    return out


def _check(spec, outputs: list[ChaosRecord]):
    mapping = parse_mapping(spec)
    inputs = inputs_of([LogRecord(mapping.input_id(r), r.topic, r.partition, r.offset, outcome)
                        for r, outcome in _inputs()])
    log = [LogRecord(mapping.output_id(r), r.topic, r.partition, r.offset, COMMITTED)
           for r in outputs]
    reads = [Read(mapping.output_id(r), r.topic, r.partition, r.offset) for r in outputs]
    return check(inputs.records, log, reads, group_offsets=inputs.ends,
                 aborted_inputs=inputs.aborted)


def _committed() -> list[ChaosRecord]:
    return [r for r, outcome in _inputs() if outcome == COMMITTED]


SPECS = ["key", "header:source", "python:tests.unit.testing.test_chaos_mapping:order",
         "python:txbroker.testing.chaos.recipes.orders:order_id", order]


@pytest.mark.parametrize("spec", SPECS)
def test_a_correct_pipeline_is_clean_under_every_mapping(spec):
    report = _check(spec, _pipeline(_committed()))
    assert report.ok, report.text()
    assert report.stats["reads"] == 2 * N


@pytest.mark.parametrize("spec", SPECS)
def test_a_dropped_output_is_a_lost_write_under_every_mapping(spec):
    sources = _committed()
    dropped = sources.pop(2)
    report = _check(spec, _pipeline(sources))
    assert report.counts == {"lost-write": 1}, report.text()
    expected = (f"orders-{dropped.partition}-{dropped.offset}" if spec == "header:source"
                else dropped.key.decode())
    assert report.anomalies["lost-write"][0]["id"] == expected


def test_key_mapping_catches_a_duplicate():
    sources = _committed()
    report = _check("key", _pipeline([*sources, sources[0]]))
    assert report.counts == {"duplicate": 1}, report.text()


def test_header_mapping_catches_output_of_an_aborted_input():
    void = next(r for r, outcome in _inputs() if outcome == ABORTED)
    report = _check("header:source", _pipeline([void, *_committed()]))
    assert report.counts == {"G1a": 1}, report.text()
    assert report.anomalies["G1a"][0]["id"] == f"orders-{void.partition}-{void.offset}"


def test_header_mapping_reads_other_separators_and_flags_a_missing_header():
    mapping = parse_mapping("header:source")
    source = _committed()[0]
    for text in ("orders-0-1", "orders-0@1", "orders:0:1", " orders-0-01 "):
        record = ChaosRecord("payments", 0, 0, None, None, (("source", text.encode()),))
        assert mapping.output_id(record) == "orders-0-1"
    assert mapping.input_id(source) == "orders-0-1"
    outputs = _pipeline(_committed())
    outputs[0] = ChaosRecord("payments", 0, 0, b"k", b"v")  # no header
    report = _check("header:source", outputs)
    assert report.counts == {"unknown-id": 1, "lost-write": 1}, report.text()


def test_python_mapping_catches_a_reordering():
    sources = _committed()
    sources[0], sources[1] = sources[1], sources[0]  # both of input partition 0
    report = _check("python:tests.unit.testing.test_chaos_mapping:order", _pipeline(sources))
    assert report.counts == {"nonmonotonic": 1}, report.text()


def test_repeated_ids_are_flagged_and_a_retried_aborted_id_is_an_input():
    log = [LogRecord("a", "orders", 0, 0, ABORTED), LogRecord("a", "orders", 0, 1, COMMITTED),
           LogRecord("b", "orders", 0, 2, COMMITTED), LogRecord("b", "orders", 1, 0, COMMITTED),
           LogRecord(None, "orders", 1, 1, COMMITTED), LogRecord("c", "orders", 1, 2, ABORTED)]
    inputs = inputs_of(log)
    assert [r.id for r in inputs.records] == ["a", "b", "b"]
    assert inputs.aborted == {"c"}
    assert inputs.repeated == {"b": 2}
    assert inputs.ends == {("orders", 0): 3, ("orders", 1): 1}


def test_the_orders_generators_mapping_reads_its_values():
    record = ChaosRecord("orders", 0, 0, b"customer-1", b'{"order": "order-x-1"}')
    assert order_id(record) == "order-x-1"
    assert order_id(ChaosRecord("orders", 0, 0, None, b"not json")) is None


@pytest.mark.parametrize("spec, why", [
    ("nope", "key, header:NAME or python:MODULE:FUNCTION expected"),
    ("header:", "key, header:NAME or python:MODULE:FUNCTION expected"),
    ("python:order", "python:MODULE:FUNCTION expected"),
    ("python:no_such_module_here:f", "No module named"),
    ("python:tests.unit.testing.test_chaos_mapping:absent", "has no attribute"),
    ("python:tests.unit.testing.test_chaos_mapping:N", "is not callable"),
])
def test_a_bad_mapping_is_refused(spec, why):
    with pytest.raises(ValueError, match=why):
        parse_mapping(spec)


def test_the_command_refuses_a_bad_mapping_before_starting_anything(capsys):
    assert main(["chaos", "--input", "a", "--output", "b", "--mapping", "nope", "--",
                 "true"]) == 2
    assert "--mapping" in capsys.readouterr().err


def test_the_command_passes_generator_and_mapping_to_the_run(monkeypatch, capsys):
    from txbroker.testing.chaos.run import ChaosReport

    import txbroker.chaos

    seen = {}

    def run(command, **options):
        seen.update(options, command=command)
        return ChaosReport(None)  # no check: not ok

    monkeypatch.setattr(txbroker.chaos, "run", run)
    assert main(["chaos", "--input", "a", "--output", "b", "--generator", "python gen.py 'x y'",
                 "--mapping", "header:source", "--", "python", "p.py"]) == 1
    assert seen["command"] == ["python", "p.py"]
    assert seen["generator"] == "python gen.py 'x y'"
    assert seen["mapping"].name == "header:source"
    assert "txbroker chaos: FAILED" in capsys.readouterr().out


def test_ids_that_name_several_inputs_fail_the_run_with_the_reason():
    from txbroker.testing.chaos.checker import Report
    from txbroker.testing.chaos.run import ChaosReport, _ambiguous

    assert _ambiguous({}, parse_mapping("key")) == []
    (error,) = _ambiguous({"customer-0": 5, "customer-1": 2}, parse_mapping("key"))
    assert "2 input id(s)" in error and "'customer-0' x5" in error
    assert "header:NAME" in error
    report = ChaosReport(Report(), errors=[error])
    assert not report.ok
    assert f"ERROR: {error}" in report.text()
    assert ChaosReport(Report()).ok
