"""The user's generator (``--generator CMD``): a command that feeds the input topic
instead of the built-in feeder. It gets the instances' environment (TXBROKER_BOOTSTRAP,
TXBROKER_INPUT, ...) plus TXBROKER_RECORDS and TXBROKER_SECONDS (how many records, over
how long: hints), runs while the faults go on, and is done when it exits 0. One that
exits otherwise (a broker crash may end it) is started again, as a supervisor would,
up to MAX_RESTARTS times. The checker learns the input by reading the input topic back
(read_committed outcomes from its markers), not from the generator.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

MAX_RESTARTS = 20


class Generator(threading.Thread):
    def __init__(self, command: Sequence[str] | str, env: Mapping[str, str],
                 log_dir: Path) -> None:
        super().__init__(name="chaos-generator", daemon=True)
        self.command = shlex.split(command) if isinstance(command, str) else list(command)
        self.env = {**os.environ, **env}
        self.log_path = log_dir / "generator.log"
        self.restarts: list[str] = []
        self.exit_code: int | None = None  # of its last run, once it gave up or finished
        self._proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen | None:
        with self._lock, open(self.log_path, "ab") as out:
            if self._stopping.is_set():  # stop() came first: start nothing it cannot see
                return None
            self._proc = subprocess.Popen(self.command, env=self.env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
            return self._proc

    def run(self) -> None:
        while (proc := self._start()) is not None:
            code = proc.wait()
            if code == 0 or self._stopping.is_set() or len(self.restarts) >= MAX_RESTARTS:
                self.exit_code = code
                return
            self.restarts.append(f"the generator exited with {code}, restarted")
            time.sleep(0.2)

    def finish(self, progress: Callable[[], int], stall_timeout: float) -> str | None:
        """Wait until it is done; the stall's reason if the input (``progress``: its
        end offsets' sum) stops growing for ``stall_timeout`` seconds first, or if it
        gave up."""
        last, last_change = None, time.monotonic()
        while self.is_alive():
            self.join(0.5)
            try:
                now = progress()
            except Exception:  # noqa: BLE001 - a broker restarting: no news is no progress
                now = last
            if now != last:
                last, last_change = now, time.monotonic()
            elif time.monotonic() - last_change > stall_timeout:
                self.stop()
                return (f"the generator made no progress for {stall_timeout:.0f}s "
                        f"(the input's end stayed at {last}): stopped; see {self.log_path}")
        if self.exit_code not in (0, None):
            return (f"the generator kept failing (last exit code {self.exit_code}, "
                    f"restarted {len(self.restarts)} times) and was given up; see "
                    f"{self.log_path}")
        return None

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        self.join(30)
