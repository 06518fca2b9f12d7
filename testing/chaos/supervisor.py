"""The pipeline instances of a chaos run: started with their environment, SIGKILLed on
demand, restarted when they die (killed or exited by themselves, as a supervisor
would), each counted. An instance can also be paused (SIGSTOP) and replaced: the
paused process is kept as a zombie, resumed (SIGCONT) beside its replacement a little
later, then killed; it is never restarted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Zombie:
    """A paused instance's process, replaced; SIGCONT at ``resume_at`` (time.monotonic),
    SIGKILL ``live_for`` seconds after it was resumed (``kill_at``) unless it exits by
    itself first (fenced, say)."""

    instance: int
    proc: subprocess.Popen
    resume_at: float
    live_for: float
    kill_at: float = 0.0
    resumed: bool = False


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
        self.zombies: list[Zombie] = []

    def start(self, instance: int) -> None:
        env = {**os.environ, **self.env, "TXBROKER_INSTANCE": str(instance),
               "TXBROKER_INSTANCES": str(self.count)}
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

    def pause(self, instance: int, resume_after: float, live_for: float) -> int | None:
        """SIGSTOP the instance's process group and start a replacement (same
        TXBROKER_INSTANCE); the paused process becomes a zombie (tend_zombies). Its pid,
        None if it was not running (restart_exited restarts it)."""
        proc = self.procs.get(instance)
        if proc is None or proc.poll() is not None:
            return None
        _signal(proc, signal.SIGSTOP)
        now = time.monotonic()
        self.zombies.append(Zombie(instance, proc, now + resume_after, live_for))
        self.start(instance)
        return proc.pid

    def next_due(self) -> float | None:
        """When tend_zombies next has something to do (time.monotonic), if ever."""
        return min((z.kill_at if z.resumed else z.resume_at for z in self.zombies),
                   default=None)

    def tend_zombies(self) -> list[str]:
        """Resume and kill the zombies that are due; what was done, as timeline events."""
        events = []
        now = time.monotonic()
        for zombie in list(self.zombies):
            pid, code = zombie.proc.pid, zombie.proc.poll()
            if code is not None:
                events.append(f"zombie exit: instance {zombie.instance}'s old process {pid} "
                              f"exited with {code}")
                self.zombies.remove(zombie)
            elif not zombie.resumed and now >= zombie.resume_at:
                _signal(zombie.proc, signal.SIGCONT)
                zombie.resumed = True
                zombie.kill_at = now + zombie.live_for  # (resumed late: it lives as long)
                events.append(f"zombie: SIGCONT instance {zombie.instance}'s old process {pid}, "
                              f"beside its replacement")
            elif zombie.resumed and now >= zombie.kill_at:
                _signal(zombie.proc, signal.SIGKILL)
                zombie.proc.wait(30)
                events.append(f"zombie kill: SIGKILL instance {zombie.instance}'s old process "
                              f"{pid}")
                self.zombies.remove(zombie)
        return events

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
        for zombie in self.zombies:  # (SIGKILL reaches a stopped process too)
            _signal(zombie.proc, signal.SIGKILL)
            zombie.proc.wait(30)
        self.zombies.clear()
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the process group of ``proc`` (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
