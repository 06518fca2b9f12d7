"""Fault points: arming from config and at run time, and what each action does."""

from __future__ import annotations

import asyncio

import pytest
from txbroker.coordinator.transaction.faults import FaultInjector


def test_arm_from_config_defaults_and_round_trip() -> None:
    faults = FaultInjector(lambda point, power_loss: None)
    faults.arm_from_config("before_complete, drop_end_txn_response,"
                           "after_first_marker=power_loss, before_markers=delay:50,"
                           "before_end_txn=expire")
    assert faults.armed == {"before_complete": "crash", "drop_end_txn_response": "drop",
                            "after_first_marker": "power_loss", "before_markers": "delay:50",
                            "before_end_txn": "expire"}
    again = FaultInjector(lambda point, power_loss: None)
    again.arm_from_config(faults.config_text())
    assert again.armed == faults.armed


@pytest.mark.parametrize(("point", "action"), [
    ("nowhere", "crash"),
    ("before_complete", "explode"),
    ("before_markers", "delay:soon"),
    ("before_complete", "expire"),  # the transaction is decided there: nothing to expire
])
def test_arm_rejects(point: str, action: str) -> None:
    with pytest.raises(ValueError):
        FaultInjector(lambda point, power_loss: None).arm(point, action)


def test_actions() -> None:
    crashes: list[tuple[str, bool]] = []
    expired: list[str] = []
    faults = FaultInjector(lambda point, power_loss: crashes.append((point, power_loss)))

    async def run() -> None:
        faults.arm("before_end_txn", "expire")
        assert await faults.hit("before_end_txn", expire=lambda: expired.append("t")) is False
        assert await faults.hit("before_end_txn", expire=lambda: expired.append("again")) is False
        faults.arm("drop_end_txn_response", "drop")
        assert await faults.hit("drop_end_txn_response") is True
        for point, action in (("before_complete", "crash"), ("before_markers", "power_loss")):
            faults.arm(point, action)
            parked = asyncio.ensure_future(faults.hit(point))
            await asyncio.sleep(0.01)
            assert not parked.done()  # a crash never returns to the protocol
            parked.cancel()

    asyncio.run(run())
    assert expired == ["t"]  # fired once, then disarmed
    assert crashes == [("before_complete", False), ("before_markers", True)]
    assert faults.fired == ["before_end_txn", "drop_end_txn_response", "before_complete",
                            "before_markers"]
    assert faults.armed == {} and faults.config_text() == ""
