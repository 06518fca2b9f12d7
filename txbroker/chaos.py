"""``txbroker.chaos.run(...)``: the ``txbroker chaos`` run from Python (for pytest);
testing/chaos/run.py has it, docs/testing-your-pipeline.md says how to use it.
``run_share(...)``: ``txbroker chaos --share``, a share-group worker pool
(testing/chaos/share_run.py)."""

from __future__ import annotations

from txbroker.testing.chaos.run import FAULT_PROFILES, ChaosReport, run
from txbroker.testing.chaos.share_run import SHARE_FAULT_PROFILES, run_share

__all__ = ["FAULT_PROFILES", "SHARE_FAULT_PROFILES", "ChaosReport", "run", "run_share"]
