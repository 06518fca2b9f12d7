"""The pipeline instances of a chaos run: started with their environment, SIGKILLed on
demand, restarted when they die (killed or exited by themselves, as a supervisor
would), each counted."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class Instances:
    def __init__(self, command: Sequence[str], count: int, env: Mapping[str, str],
                 log_dir: Path) -> None:
        self.command = list(command)
        self.count = count
        self.env = dict(env)
        self.log_dir = log_dir
        self.procs: dict[int, subprocess.Popen] = {}
        self.kills = 0
        self.exits: list[tuple[int, int]] = []  # (instance, exit code) of own exits
        self.starts = 0

    def start(self, instance: int) -> None:
        env = {**os.environ, **self.env, "TXBROKER_INSTANCE": str(instance)}
        env.pop("PYTHONWARNINGS", None)
        with open(self.log_dir / f"instance-{instance}.log", "ab") as out:
            self.procs[instance] = subprocess.Popen(
                self.command, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)  # a SIGKILL takes its children too (killpg)
        self.starts += 1

    def start_all(self) -> None:
        for instance in range(self.count):
            self.start(instance)

    def kill(self, instance: int) -> None:
        """SIGKILL the instance (and its process group), then start it again."""
        proc = self.procs.get(instance)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            self.kills += 1
        self.start(instance)

    def restart_exited(self) -> list[tuple[int, int]]:
        """Start again every instance that exited by itself; [(instance, exit code)]."""
        exited = []
        for instance, proc in list(self.procs.items()):
            code = proc.poll()
            if code is not None:
                exited.append((instance, code))
                self.exits.append((instance, code))
                self.start(instance)
        return exited

    def stop(self, timeout: float = 10) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
