"""A Spark standalone cluster from pyspark's own jars: one master and workers, each a
separate JVM started with ``spark-class`` (pyspark ships it in ``pyspark/bin``), on
ephemeral ports, for the cluster tests (issue 30, item 3)::

    with SparkStandalone(tmp_path, workers=2) as spark_cluster:
        subprocess.run([spark_submit, "--master", spark_cluster.master_url, ...])
        spark_cluster.kill_worker(0)   # SIGKILL; its executor exits with it

Executors run Python with the interpreter that ``spark.pyspark.python`` names: the
tests pass this virtual environment's, which every process on the machine shares (the
"shared interpreter path" way of shipping Python dependencies; docs/spark.md).
Logs stay in ``<work_dir>/master.log`` and ``worker-<i>.log`` (executor logs under
``worker-<i>/``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.kafka_reference import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def executor_pids() -> set[int]:
    """Process ids of this user's running Spark executors."""
    done = subprocess.run(["pgrep", "-u", str(os.getuid()), "-f",
                           "CoarseGrainedExecutorBackend"], capture_output=True, text=True)
    return {int(p) for p in done.stdout.split()}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    def __init__(self, work_dir: str | Path, workers: int = 2, cores: int = 1,
                 memory: str = "1g", nice: int = 10) -> None:
        self.work_dir = Path(work_dir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.nice = nice
        self.host = "127.0.0.1"
        self.port = 0
        self.ui_port = 0
        self.master: subprocess.Popen | None = None
        self.worker_procs: list[subprocess.Popen] = []
        self._logs: list = []
        self.startup_seconds = 0.0

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def _spawn(self, name: str, main: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_DAEMON_MEMORY="256m",
                   # C1 only: quicker start-up on two shared cores. No REST submission
                   # server (it would take the fixed port 6066).
                   SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1",
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                   SPARK_LOCAL_IP=self.host, SPARK_LOG_DIR=str(self.work_dir),
                   SPARK_WORKER_DIR=str(self.work_dir / name))
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 (closed in stop)
        self._logs.append(log)
        # spark-class execs java: the process id is the JVM's.
        prefix = ["nice", "-n", str(self.nice)] if self.nice else []
        return subprocess.Popen([*prefix, str(spark_home() / "bin" / "spark-class"), main, *args],
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def start(self, timeout: float = 90) -> SparkStandalone:
        began = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self.master = self._spawn("master", MASTER, "--host", self.host, "--port",
                                  str(self.port), "--webui-port", str(self.ui_port))
        try:
            for i in range(self.workers):
                (self.work_dir / f"worker-{i}").mkdir(exist_ok=True)
                self.worker_procs.append(self._spawn(
                    f"worker-{i}", WORKER, self.master_url, "--host", self.host,
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--webui-port", str(free_port()),
                    "--work-dir", str(self.work_dir / f"worker-{i}")))
            self.wait_workers(self.workers, began + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def state(self) -> dict:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"http://{self.host}:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def wait_workers(self, count: int, deadline: float) -> None:
        while True:
            assert self.master is not None and self.master.poll() is None, \
                "Spark master exited:\n" + self.log_tails()
            try:
                if self.alive_workers() == count:
                    return
            except OSError:
                pass  # the master's web UI is not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} Spark workers not registered:\n{self.log_tails()}")
            time.sleep(0.3)

    def worker_of(self, pid: int) -> int:
        """The index of the worker whose process tree holds ``pid`` (an executor's
        Python worker: worker JVM > executor JVM > pyspark daemon > Python worker)."""
        workers = {p.pid: i for i, p in enumerate(self.worker_procs)}
        while pid > 1:
            if pid in workers:
                return workers[pid]
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's id
        raise LookupError("not a process of this cluster's workers")

    def kill_worker(self, index: int) -> None:
        """SIGKILL the worker's JVM (its executors notice and exit)."""
        proc = self.worker_procs[index]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self, timeout: float = 20) -> None:
        procs = [p for p in [*self.worker_procs, self.master] if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for log in self._logs:
            log.close()
        self._logs.clear()

    def log_tails(self, lines: int = 30) -> str:
        out = []
        for path in sorted(self.work_dir.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(out)

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
