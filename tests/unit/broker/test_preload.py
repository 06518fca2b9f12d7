"""The background import of kio's schemas waits for a lull in requests (issue 25 item 4)."""

from __future__ import annotations

import asyncio
import types

from txbroker.broker import server


def test_preload_waits_while_requests_arrive_and_runs_when_idle(monkeypatch) -> None:
    imported: list[tuple[int, int]] = []
    monkeypatch.setattr(server, "preload_schemas",
                        lambda ranges: imported.extend((k, lo) for k, lo, _ in ranges))
    monkeypatch.setattr(server, "PRELOAD_IDLE_S", 0.01)
    broker = types.SimpleNamespace(requests_received=0, shares=None)

    async def scenario() -> None:
        task = asyncio.create_task(server._preload_when_idle(
            broker, [(0, 8, 9)], [(1, 11, 12)], None))
        # A request at every loop turn for 0.2 s: the preload's 10 ms waits never end
        # in a lull (a turn runs between its sleep and its check), so nothing is imported
        # however slow the machine.
        end = asyncio.get_running_loop().time() + 0.2
        while asyncio.get_running_loop().time() < end:
            broker.requests_received += 1
            await asyncio.sleep(0)
        assert imported == []
        await asyncio.wait_for(task, 5)  # idle now: everything, first ones first

    asyncio.run(scenario())
    assert imported == [(0, 9), (0, 8), (1, 12), (1, 11)]
