"""Broker fail-overs in the middle of a running job, for the cluster tests.

``FailOver`` is a background thread that waits until a job has made some progress (a
condition the test gives, e.g. "the processor's journal shows 5 commits"), SIGKILLs a
broker chosen at that moment (the leader of a partition, the transaction coordinator of
a transactional.id), waits until the job has made progress without it, restarts it and
waits until it is back in the partitions' ISRs. Every step waits on a condition, never
on a fixed sleep; the test asserts afterwards that the kill really came mid-run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.cluster.cluster import KafkaCluster


@dataclass
class Kill:
    """One fail-over: when ``before`` holds, kill the node ``victim()`` names; restart it
    once ``after`` holds (or ``done`` is set: the job finished without it)."""

    what: str
    before: Callable[[], bool]
    victim: Callable[[], int]
    after: Callable[[], bool]
    node: int = 0
    killed_at: float = 0.0
    restarted_at: float = 0.0
    progress_while_down: bool = False


class FailOver(threading.Thread):
    """Runs ``kills`` one after the other; ``in_sync``: the topics whose ISRs must be
    whole again after each restart."""

    def __init__(self, cluster: KafkaCluster, kills: list[Kill], in_sync: list[str],
                 timeout: float = 180) -> None:
        super().__init__(name="fail-over", daemon=True)
        self.cluster = cluster
        self.kills = kills
        self.in_sync = in_sync
        self.timeout = timeout
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for kill in self.kills:
                self._wait(lambda k=kill: k.before() or self.done.is_set(),
                           f"{kill.what}: the job's progress before the kill")
                if self.done.is_set():
                    raise AssertionError(f"{kill.what}: the job finished before the kill")
                kill.node = kill.victim()
                kill.killed_at = time.monotonic()
                self.cluster.kill(kill.node)
                self._wait(lambda k=kill: k.after() or self.done.is_set(),
                           f"{kill.what}: the job's progress without node {kill.node}")
                kill.progress_while_down = kill.after()
                self.cluster.restart(kill.node)
                self.cluster.wait_in_sync(self.in_sync)
                kill.restarted_at = time.monotonic()
        except BaseException as e:  # reported by check()
            self.error = e

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def finish(self) -> list[Kill]:
        """Tell the thread the job is over, wait for its restarts; raise its error."""
        self.done.set()
        self.join(self.timeout)
        assert not self.is_alive(), "fail-over thread still running"
        if self.error is not None:
            raise self.error
        return self.kills
