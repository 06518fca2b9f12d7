"""The user's generator of a chaos run (testing/chaos/generator.py), with real
processes: restarted when it fails, done when it exits 0, stopped and reported as a
stall when the input stops growing, given up after its restarts (~2 s)."""

from __future__ import annotations

import txbroker.testing.chaos.generator as generator_module
from txbroker.testing.chaos.generator import Generator


def test_a_failing_generator_is_restarted_until_it_exits_0(tmp_path):
    runs = tmp_path / "runs"
    script = (f'n=$(cat {runs} 2>/dev/null || echo 0); echo $((n+1)) > {runs}; '
              f'echo "run $n $TXBROKER_INPUT"; [ "$n" -ge 2 ]')
    gen = Generator(["sh", "-c", script], {"TXBROKER_INPUT": "orders"}, tmp_path)
    gen.start()
    assert gen.finish(lambda: 0, stall_timeout=30) is None
    assert runs.read_text().strip() == "3"
    assert gen.restarts == ["the generator exited with 1, restarted"] * 2
    assert "run 2 orders" in (tmp_path / "generator.log").read_text()


def test_a_generator_that_stops_feeding_is_a_stall_and_is_stopped(tmp_path):
    gen = Generator("sleep 60", {}, tmp_path)
    gen.start()
    why = gen.finish(lambda: 42, stall_timeout=0.5)
    assert why is not None and "no progress for 0s" in why and "stayed at 42" in why
    assert not gen.is_alive()
    assert gen._proc.poll() is not None  # the process is gone too


def test_a_generator_that_keeps_failing_is_given_up(tmp_path, monkeypatch):
    monkeypatch.setattr(generator_module, "MAX_RESTARTS", 2)
    gen = Generator(["sh", "-c", "exit 3"], {}, tmp_path)
    gen.start()
    why = gen.finish(lambda: 0, stall_timeout=30)
    assert why is not None and "last exit code 3, restarted 2 times" in why
    assert len(gen.restarts) == 2
