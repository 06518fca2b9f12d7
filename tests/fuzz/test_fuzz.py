"""The frame fuzzer, bounded for `make test`, and the replay of every saved case.

Saved cases still marked ``"open"`` (the issue that tracks them) are strict xfails:
the day the fix lands the test XPASSes and fails, and whoever fixed it removes the
mark, so the case guards the fix from then on. The bounded run fails on any finding
that is not such an open case.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from txbroker.broker.handlers import HANDLER_TABLE, supported_versions

from tests.fuzz.corpus import UPCOMING, UPCOMING_APIS, api_of, coverage_gaps, load, read_frames
from tests.fuzz.frames import (
    REGRESSIONS,
    BrokerUnderTest,
    Canary,
    _exchange,
    _open,
    case_frames,
    fuzz,
    known_signatures,
)

CASES = sorted(REGRESSIONS.glob("*.json"))
FRAMES = int(os.environ.get("FUZZ_TEST_FRAMES", "15000"))
SEED = int(os.environ.get("FUZZ_TEST_SEED", "14"))


def test_corpus_covers_every_served_api() -> None:
    """Every (API key, version) the broker advertises in ApiVersions has a seed frame: a
    newly served API or version without one fails here (python -m tests.fuzz.capture
    rebuilds the corpus)."""
    gaps = coverage_gaps(load(), supported_versions())
    assert not gaps, (f"advertised but not in the fuzz corpus: {gaps}; run "
                      "`.venv/bin/python -m tests.fuzz.capture` and commit tests/fuzz/corpus/")


def test_corpus_seeds_the_upcoming_apis() -> None:
    """The APIs other engineers are adding (share and streams groups) are seeded already,
    at every version kio has a schema for, so the fuzzer meets them the day they are
    served (and meanwhile checks that the broker refuses them quietly)."""
    from txbroker.protocol.messages import request_class

    have = {api_of(f) for f in load()}
    missing = [(key, v) for key in UPCOMING_APIS for v in range(16)
               if request_class(key, v) is not None and (key, v) not in have]
    assert not missing, f"upcoming APIs without a corpus frame: {missing}"


def test_upcoming_apis_are_refused_quietly() -> None:
    """The corpus frames of the APIs not served yet, unmutated: the broker closes the
    connection (an unknown API key, as Kafka does), with no traceback or ERROR line;
    once one is served, its frames must not make the broker die or log one either."""
    frames = read_frames(UPCOMING)
    with tempfile.TemporaryDirectory(prefix="fuzz-upcoming-") as d:
        broker = BrokerUnderTest(d)
        broker.start()
        try:
            async def send() -> list[tuple[tuple[int, int], str]]:
                out = []
                for frame in frames:
                    conn = await _open(broker.port)
                    out.append((api_of(frame), await _exchange(
                        conn, len(frame).to_bytes(4, "big") + frame, 5.0)))
                    conn[1].close()
                return out

            outcomes = asyncio.run(send())
            time.sleep(0.3)
            assert broker.alive(), "broker died:\n" + "".join(broker.tail())
            bad = broker.new_bad_lines()
            assert not bad, "bad log lines:\n" + "".join(bad)
            unserved = [(api, o) for api, o in outcomes if api[0] not in HANDLER_TABLE]
            assert all(o == "closed" for _, o in unserved), unserved
        finally:
            broker.proc.kill()


def _case_param(path: Path):
    case = json.loads(path.read_text())
    marks = [pytest.mark.xfail(strict=True, reason=case["open"])] if case.get("open") else []
    return pytest.param(path, marks=marks, id=path.stem)


@pytest.mark.parametrize("path", [_case_param(p) for p in CASES])
def test_regression_case(path: Path) -> None:
    """Replay a saved input on one connection: the broker survives, logs no traceback or
    ERROR, still serves acks=all produce + read back, and exits 0 on SIGTERM."""
    case = json.loads(path.read_text())
    frames = case_frames(case)
    with tempfile.TemporaryDirectory(prefix="fuzz-case-") as d:
        broker = BrokerUnderTest(d, case.get("broker_config"))  # as the run that found it
        broker.start()
        try:
            canary = Canary(broker.proc.bootstrap)

            async def replay() -> None:
                conn = None
                for frame in frames:
                    if conn is None:
                        conn = await _open(broker.port)
                    if await _exchange(conn, frame, 2.0) != "answered":
                        conn[1].close()
                        conn = None
                if conn is not None:
                    conn[1].close()

            asyncio.run(replay())
            time.sleep(0.5)  # a slow effect's log lines
            assert broker.alive(), "broker died:\n" + "".join(broker.tail())
            bad = broker.new_bad_lines()
            assert not bad, "bad log lines:\n" + "".join(bad)
            problem = canary.check()
            assert problem is None, problem
            assert broker.proc.terminate(40) == 0, "SIGTERM exit code != 0"
        finally:
            broker.proc.kill()


def test_bounded_fuzz(tmp_path: Path) -> None:
    """~15,000 mutated frames (`make fuzz` runs more) (seeded, deterministic frames) against a broker process:
    no crash, traceback, ERROR line or stalled normal client; clean SIGTERM; all data
    acknowledged to the normal client intact after a restart."""
    result = fuzz(FRAMES, seed=SEED, save_dir=tmp_path, max_seconds=300,
                  stop_when_broken=True)
    known = known_signatures()
    new = [f for f in result.findings if f.signature not in known]
    report = "\n".join(f"{f.signature}: {f.detail} ({len(f.frames)} frames, "
                       f"{f.labels[:1]}) -> {f.saved_to}" for f in new)
    assert not new, f"the fuzzer found new bugs (saved under {tmp_path}):\n{report}"
    if result.findings:
        pytest.xfail("known open bugs: " + "; ".join(sorted({known[f.signature]
                                                              for f in result.findings})))
    assert result.frames == FRAMES, f"only {result.frames} of {FRAMES} frames in 300 s"
    assert result.outcomes["answered"] + result.outcomes["closed"] > FRAMES // 2
    assert result.canary_acked > 0
