"""The data directory: topics, their partition logs, checkpoints and background work.

Layout of a data directory::

    meta.properties                    cluster.id, node.id (Kafka's file name)
    topics.json                        topic name -> id, partition count, config overrides
    recovery-point-offset-checkpoint   flushed offset per partition (Kafka's format)
    log-start-offset-checkpoint        log start offset per partition
    cleaner-offset-checkpoint          offset compacted logs are cleaned up to
    .txbroker_cleanshutdown            present only after a clean shutdown
    <topic>-<partition>/               segments: <base>.log, .index, .timeindex
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from txbroker.protocol.errors import ErrorCode, KafkaError

from .cleaner import CLEANER_CHECKPOINT_FILE, LogCleaner
from .flusher import Flusher
from .log import PartitionLog
from .log_config import TOPIC_CONFIGS, ConfigError, LogConfig, validate_topic_config

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".txbroker_cleanshutdown"
TOPICS_FILE = "topics.json"
MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicError(KafkaError):
    pass


def validate_topic_name(name: str) -> None:
    if not name:
        raise TopicError("topic name is empty", ErrorCode.invalid_topic_exception)
    if name in (".", ".."):
        raise TopicError(f"topic name {name!r} is not allowed", ErrorCode.invalid_topic_exception)
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(f"topic name is longer than {MAX_TOPIC_NAME} characters",
                         ErrorCode.invalid_topic_exception)
    if not _LEGAL_TOPIC.match(name):
        raise TopicError(f"topic name {name!r} has characters other than [a-zA-Z0-9._-]",
                         ErrorCode.invalid_topic_exception)


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only
    internal: bool = False

    def to_json(self) -> dict:
        return {"topic_id": str(self.topic_id), "partitions": self.partitions,
                "configs": self.configs, "internal": self.internal}

    @classmethod
    def from_json(cls, name: str, data: dict) -> TopicInfo:
        return cls(name, uuid.UUID(data["topic_id"]), int(data["partitions"]),
                   dict(data.get("configs", {})), bool(data.get("internal", False)))


def _read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    result: dict[tuple[str, int], int] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return result
    try:
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            result[(topic, int(partition))] = int(offset)
    except ValueError:
        log.warning("ignoring malformed checkpoint file %s", path)
        return {}
    return result


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class LogManager:
    def __init__(self, data_dir: str, broker_defaults: Mapping[str, str] | None = None,
                 *, node_id: int = 1, retention_check_interval_ms: int = 300_000,
                 cleaner_backoff_ms: int = 15_000,
                 producer_id_expiration_ms: int = 86_400_000) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.broker_defaults = dict(broker_defaults or {})  # topic config name -> value
        self.node_id = node_id
        self.retention_check_interval_ms = retention_check_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.topics: dict[str, TopicInfo] = {}
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.cluster_id = ""
        self.flusher = Flusher()
        self.cleaner = LogCleaner(os.path.join(self.data_dir, CLEANER_CHECKPOINT_FILE),
                                  backoff_ms=cleaner_backoff_ms)
        self._lock_fd = -1
        self._tasks: list[asyncio.Task] = []
        self.was_clean_shutdown = False

    # --- lifecycle -----------------------------------------------------------------

    def open(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.data_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise RuntimeError(f"data directory {self.data_dir} is in use by another broker") from None
        self._load_meta_properties()
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        self.was_clean_shutdown = os.path.exists(marker)
        if self.was_clean_shutdown:
            os.unlink(marker)
        for name in os.listdir(self.data_dir):
            if name.endswith("-delete"):
                shutil.rmtree(os.path.join(self.data_dir, name), ignore_errors=True)
        try:
            with open(os.path.join(self.data_dir, TOPICS_FILE)) as f:
                raw = json.load(f)
        except FileNotFoundError:
            raw = {}
        self.topics = {name: TopicInfo.from_json(name, data) for name, data in raw.items()}
        recovery = _read_checkpoint(os.path.join(self.data_dir, "recovery-point-offset-checkpoint"))
        starts = _read_checkpoint(os.path.join(self.data_dir, "log-start-offset-checkpoint"))
        for info in self.topics.values():
            config = self.log_config(info.name)
            for p in range(info.partitions):
                plog = PartitionLog(info.name, p, self._partition_dir(info.name, p), config)
                plog.open(log_start_offset=starts.get((info.name, p), 0),
                          recovery_point=recovery.get((info.name, p)),
                          clean=self.was_clean_shutdown)
                self.logs[(info.name, p)] = plog
        log.info("opened %d topic(s), %d partition(s) in %s (%s shutdown)", len(self.topics),
                 len(self.logs), self.data_dir, "clean" if self.was_clean_shutdown else "unclean")

    def _load_meta_properties(self) -> None:
        path = os.path.join(self.data_dir, "meta.properties")
        props: dict[str, str] = {}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if "=" in line and not line.startswith("#"):
                        k, v = line.strip().split("=", 1)
                        props[k] = v
        if "cluster.id" not in props:
            props["cluster.id"] = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            props["node.id"] = str(self.node_id)
            props["version"] = "1"
            _atomic_write(path, "".join(f"{k}={v}\n" for k, v in props.items()).encode())
        self.cluster_id = props["cluster.id"]

    async def start(self) -> None:
        """Start the flusher and the retention/checkpoint/log cleaner background tasks."""
        for plog in self.logs.values():
            self.flusher.track(plog)
        self.flusher.start(list(self.logs.values()))
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._checkpoint_loop(), name="checkpoints"))
        self._tasks.append(asyncio.create_task(self.cleaner.run(lambda: list(self.logs.values())),
                                               name="log-cleaner"))

    async def close(self) -> None:
        await self.cleaner.stop()  # waits for a cleaning in its thread to abort
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.flusher.stop()
        for plog in self.logs.values():
            plog.close()
        self.write_checkpoints()
        with open(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE), "w"):
            pass
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
        log.info("closed data directory %s", self.data_dir)

    def flushed_offsets(self) -> dict[tuple[str, int], int]:
        """Per partition, the offset below which everything is fsynced."""
        return {key: plog.flushed_offset for key, plog in self.logs.items()}

    def abandon(self, *, power_loss: bool = False,
                durable: Mapping[tuple[str, int], int] | None = None) -> None:
        """Fault injection's in-process crash: stop background work and close every file
        without flushing, checkpointing or leaving a clean-shutdown marker (what SIGKILL
        leaves behind: unflushed writes remain in the page cache).

        ``power_loss``: a power failure instead; every partition log is first cut back
        to what was fsynced (``PartitionLog.simulate_power_loss``), at the offsets of
        ``durable`` (from ``flushed_offsets()`` when the power went; default: now)."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self.flusher.abandon()  # no fsync round finishes after this
        for key, plog in self.logs.items():
            if power_loss and not plog.closed:
                plog.simulate_power_loss(None if durable is None else durable.get(key))
            plog.closed = True
            for seg in plog.segments:
                seg.close()
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
        log.error("data directory %s abandoned (simulated %s)", self.data_dir,
                  "power loss" if power_loss else "crash")

    # --- configuration -----------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        values = dict(self.broker_defaults)
        info = self.topics.get(topic)
        if info is not None:
            values.update(info.configs)
        return LogConfig.from_values(values)

    def effective_topic_configs(self, topic: str) -> dict[str, tuple[str, str]]:
        """name -> (value, source) with source one of topic, broker, default."""
        info = self.topics[topic]
        out = {}
        for name, d in TOPIC_CONFIGS.items():
            if name in info.configs:
                out[name] = (info.configs[name], "topic")
            elif name in self.broker_defaults:
                out[name] = (self.broker_defaults[name], "broker")
            else:
                out[name] = (d.default, "default")
        return out

    # --- topics --------------------------------------------------------------------------

    def _partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.data_dir, f"{topic}-{partition}")

    def _save_topics(self) -> None:
        data = {name: info.to_json() for name, info in sorted(self.topics.items())}
        _atomic_write(os.path.join(self.data_dir, TOPICS_FILE),
                      json.dumps(data, indent=1).encode())

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> None:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(f"topic {name!r} already exists", ErrorCode.topic_already_exists)
        collision = name.replace(".", "_")
        for other in self.topics:
            if other.replace(".", "_") == collision:
                raise TopicError(f"topic {name!r} collides with {other!r} ('.' and '_' collide)",
                                 ErrorCode.invalid_topic_exception)
        if partitions < 1:
            raise TopicError(f"number of partitions must be at least 1, got {partitions}",
                             ErrorCode.invalid_partitions)
        for key, value in configs.items():
            try:
                validate_topic_config(key, value)
            except ConfigError as e:
                raise TopicError(f"invalid config {key}={value!r}: {e}",
                                 ErrorCode.invalid_config) from None

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
                     *, internal: bool = False) -> TopicInfo:
        configs = {k: v for k, v in (configs or {}).items() if v is not None}
        self.check_new_topic(name, partitions, configs)
        info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs), internal)
        self.topics[name] = info
        self._open_partitions(info, 0, partitions)
        self._save_topics()
        log.info("created topic %s with %d partition(s) %s", name, partitions, configs or "")
        return info

    def _open_partitions(self, info: TopicInfo, start: int, end: int) -> None:
        config = self.log_config(info.name)
        for p in range(start, end):
            directory = self._partition_dir(info.name, p)
            if os.path.exists(directory):  # leftovers of an older topic with this name
                shutil.rmtree(directory)
            plog = PartitionLog(info.name, p, directory, config)
            plog.open()
            with open(os.path.join(directory, "partition.metadata"), "w") as f:
                f.write(f"version: 0\ntopic_id: {_kafka_uuid(info.topic_id)}\n")
            self.logs[(info.name, p)] = plog
            self.flusher.track(plog)

    def delete_topic(self, name: str) -> None:
        info = self.topics.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.unknown_topic_or_partition)
        if info.internal:
            raise TopicError(f"internal topic {name!r} cannot be deleted",
                             ErrorCode.topic_authorization_failed)
        del self.topics[name]
        self._save_topics()
        for p in range(info.partitions):
            plog = self.logs.pop((name, p), None)
            if plog is None:
                continue
            self.flusher.untrack(plog)
            plog.close()
            doomed = f"{plog.directory}.{uuid.uuid4().hex}-delete"
            os.rename(plog.directory, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        info = self.topics.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.unknown_topic_or_partition)
        if total <= info.partitions:
            raise TopicError(
                f"topic {name!r} has {info.partitions} partitions; the new count must be larger, "
                f"got {total}", ErrorCode.invalid_partitions)
        if validate_only:
            return
        old = info.partitions
        info.partitions = total
        self._open_partitions(info, old, total)
        self._save_topics()
        log.info("topic %s now has %d partitions", name, total)

    def alter_topic_configs(self, name: str, configs: dict[str, str],
                            *, validate_only: bool = False) -> None:
        """Replace the topic's overrides with ``configs`` and reconfigure its logs."""
        info = self.topics.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.unknown_topic_or_partition)
        for key, value in configs.items():
            try:
                validate_topic_config(key, value)
            except ConfigError as e:
                raise TopicError(f"invalid config {key}={value!r}: {e}",
                                 ErrorCode.invalid_config) from None
        if validate_only:
            return
        info.configs = dict(configs)
        self._save_topics()
        config = self.log_config(name)
        for p in range(info.partitions):
            self.logs[(name, p)].config = config
        log.info("topic %s config overrides now %s", name, configs)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    # --- background ------------------------------------------------------------------------

    def run_retention(self) -> int:
        deleted = 0
        now = int(time.time() * 1000)
        for plog in list(self.logs.values()):
            if not plog.closed:
                deleted += plog.delete_old_segments(now)
                plog.producer_state.expire(now, self.producer_id_expiration_ms)
        return deleted

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_interval_ms / 1000)
            try:
                self.run_retention()
            except Exception:
                log.exception("retention check failed")

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(5)
            try:
                rows = self._checkpoint_rows()
                await asyncio.get_running_loop().run_in_executor(None, self._write_checkpoint_rows,
                                                                 rows)
            except Exception:
                log.exception("writing checkpoints failed")

    def _checkpoint_rows(self) -> tuple[list, list]:
        logs = list(self.logs.values())
        recovery = [(p.topic, p.partition, p.flushed_offset) for p in logs]
        starts = [(p.topic, p.partition, p.log_start_offset) for p in logs]
        return recovery, starts

    def write_checkpoints(self) -> None:
        self._write_checkpoint_rows(self._checkpoint_rows())

    def _write_checkpoint_rows(self, rows: tuple[list, list]) -> None:
        recovery, starts = rows
        for fname, rows in (("recovery-point-offset-checkpoint", recovery),
                            ("log-start-offset-checkpoint", starts)):
            text = f"0\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for t, p, o in rows)
            _atomic_write(os.path.join(self.data_dir, fname), text.encode())


def _kafka_uuid(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
