"""bench.compare's pure part: ratios, their direction, medians, the verdict (no brokers)."""

from pathlib import Path

import pytest

from bench import compare

PRODUCE = compare.LOADS["produce"]
FIXTURE = compare.LOADS["fixture"]


def test_throughput_ratio_is_this_over_base():
    assert compare.round_ratio(120.0, 100.0, PRODUCE.higher_is_better) == pytest.approx(1.2)
    assert compare.round_ratio(50.0, 100.0, PRODUCE.higher_is_better) == pytest.approx(0.5)


def test_fixture_start_is_a_time_so_its_ratio_is_base_over_this():
    assert not FIXTURE.higher_is_better and FIXTURE.unit == "s"
    assert all(compare.LOADS[k].higher_is_better for k in ("produce", "consume", "txn"))
    # This checkout starts in 0.5 s, the base in 1.0 s: twice as good, ratio 2 (> 1).
    assert compare.round_ratio(0.5, 1.0, FIXTURE.higher_is_better) == pytest.approx(2.0)
    assert compare.round_ratio(1.0, 0.5, FIXTURE.higher_is_better) == pytest.approx(0.5)
    assert compare.summarize(FIXTURE, [{"this": 0.5, "base": 1.0}])["ratio_is"] == "base/this"


def test_a_missing_or_zero_side_has_no_ratio():
    assert compare.round_ratio(None, 1.0, True) is None
    assert compare.round_ratio(1.0, None, False) is None
    assert compare.round_ratio(0.0, 1.0, True) is None


def test_the_fixture_session_writes_and_reuses_bytecode_like_a_users(monkeypatch, tmp_path):
    # Inherited PYTHONDONTWRITEBYTECODE would make every timed session compile the
    # broker's modules from source, which a user's installed package never does.
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = compare.fixture_session_env(tmp_path, tmp_path / "result.json")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPATH"] == str(tmp_path)
    assert env["BENCH_COMPARE_RESULT"] == str(tmp_path / "result.json")


def test_rounds_alternate_which_broker_goes_first():
    assert [compare.first_in_round(r) for r in range(4)] == [
        ("this", "base"), ("base", "this"), ("this", "base"), ("base", "this")]


def test_fixture_starts_interleave_from_the_rounds_first_side():
    assert compare.start_order(("this", "base"), 3) == [
        "this", "base", "base", "this", "this", "base"]
    assert compare.start_order(("base", "this"), 2) == ["base", "this", "this", "base"]


def test_summary_is_the_median_of_the_per_round_ratios():
    rounds = [{"this": 100.0, "base": 50.0}, {"this": 90.0, "base": 100.0},
              {"this": 110.0, "base": 100.0}, {"this": None, "base": 100.0}]
    s = compare.summarize(PRODUCE, rounds)
    assert s["this_median"] == 100.0
    assert s["base_median"] == 100.0
    assert s["round_ratios"] == [2.0, 0.9, 1.1, None]
    assert s["ratio"] == 1.1  # median of 2.0, 0.9, 1.1 (not this_median / base_median)
    assert compare.summarize(PRODUCE, [{"this": None, "base": 1.0}])["ratio"] is None


def test_median_ci95_takes_the_order_statistics_that_cover_95_percent():
    # Below 6 rounds even [min, max] covers less than 95 % (5 rounds: 30/32).
    assert compare.median_ci95([1.0, 0.9, 1.1, 0.8, 1.2]) is None
    assert compare.median_ci95([0.9, None, 1.1, 0.8, 1.2, 1.0, 0.95]) == (0.8, 1.2)
    # 11 rounds: x(2) and x(10) (98.8 %; x(3)..x(9) would be 93.5 %).
    values = [i / 10 for i in range(11)]
    assert compare.median_ci95(values[::-1]) == (0.1, 0.9)
    # 21 rounds: x(6) and x(16) (97.3 %; x(7)..x(15) would be 92.2 %).
    assert compare.median_ci95(list(range(21))) == (5, 15)


def test_summary_carries_the_interval_and_the_terminal_line_says_it():
    rounds = [{"this": 100.0 + i, "base": 100.0} for i in range(6)]
    s = compare.summarize(PRODUCE, rounds)
    assert s["ratio_ci95"] == [1.0, 1.05]
    assert "95% CI 1.00-1.05, 6 rounds" in compare.ratio_line("produce", s)
    short = compare.summarize(PRODUCE, rounds[:3])
    assert short["ratio_ci95"] is None
    assert "no 95% CI below 6 rounds" in compare.ratio_line("produce", short)


def summaries(**ratios):
    return {k: {"ratio": r} for k, r in ratios.items()}


def test_verdict_passes_at_and_above_the_threshold():
    code, lines = compare.verdict(summaries(produce=0.9, txn=1.3, fixture=1.0), 0.9)
    assert code == 0
    assert lines == ["OK: every median ratio is at least 0.9"]


def test_verdict_fails_below_the_threshold_and_names_the_load():
    code, lines = compare.verdict(summaries(produce=1.02, consume=0.85, fixture=0.5), 0.9)
    assert code == 1
    assert len(lines) == 1
    assert "consume 0.85" in lines[0] and "fixture 0.50" in lines[0]
    assert "produce" not in lines[0]
    assert compare.verdict(summaries(produce=0.85), 0.8)[0] == 0


def test_verdict_fails_when_a_load_could_not_be_compared():
    code, lines = compare.verdict(summaries(produce=1.0, txn=None), 0.9)
    assert code == 1
    assert lines[0].startswith("NOT COMPARED: txn")


def test_arguments(monkeypatch):
    monkeypatch.delenv("BASE", raising=False)
    with pytest.raises(SystemExit):
        compare.parse_args([])
    args = compare.parse_args(["--base", "abc123"])
    assert (args.base, args.rounds, args.threshold) == ("abc123", 3, 0.9)
    assert args.only == ["produce", "consume", "txn", "fixture"]
    monkeypatch.setenv("BASE", "HEAD~2")
    assert compare.parse_args(["--only", "txn,fixture"]).only == ["txn", "fixture"]
    assert compare.parse_args([]).base == "HEAD~2"
    with pytest.raises(SystemExit):
        compare.parse_args(["--only", "produce,bogus"])
    assert compare.parse_args(["--this-override", "a.b=1", "--this-override", "c=2"]
                              ).this_override == ["a.b=1", "c=2"]
    with pytest.raises(SystemExit):
        compare.parse_args(["--this-override", "novalue"])


def test_out_is_a_directory_or_a_file_name():
    assert compare.out_paths(Path("bench/results")) == (Path("bench/results"), "compare")
    assert compare.out_paths(Path("/tmp/x/ab.json")) == (Path("/tmp/x"), "ab")


def test_markdown_says_which_way_is_better():
    summary = {"produce": compare.summarize(PRODUCE, [{"this": 100.0, "base": 50.0}]),
               "fixture": compare.summarize(FIXTURE, [{"this": 0.4, "base": 0.5}])}
    code, lines = compare.verdict(summary, 0.9)
    machine = {"date": "d", "txbroker_commit": "abc", "cpu_model": "cpu", "logical_cores": 2,
               "memory_gb": 4, "python": "3.11", "confluent_kafka": "2", "loadavg_start": [0],
               "loadavg_end": [0]}
    md = compare.render_markdown({
        "command": "python -m bench.compare --base x", "machine": machine,
        "base": {"ref": "x", "commit": "f" * 40, "subject": "s"},
        "options": {"rounds": 1, "messages": 10, "txn_seconds": 1}, "wall_seconds": 1,
        "summary": summary, "verdict": lines, "errors": []})
    assert code == 0
    assert "ratio > 1 is better for this checkout in every row" in md
    assert "| **2.00** (this/base) |" in md
    assert "s (lower is better)" in md and "| **1.25** (base/this) |" in md
