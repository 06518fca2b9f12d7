"""``txbroker.chaos.run(...)``: the ``txbroker chaos`` run from Python (for pytest);
testing/chaos/run.py has it, docs/testing-your-pipeline.md says how to use it."""

from __future__ import annotations

from txbroker.testing.chaos.run import FAULT_PROFILES, ChaosReport, run

__all__ = ["FAULT_PROFILES", "ChaosReport", "run"]
