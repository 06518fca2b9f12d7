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
import random
import re
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from txbroker.protocol.errors import ErrorCode, KafkaError

from .cleaner import CLEANER_CHECKPOINT_FILE, LogCleaner
from .condition_log import ConditionLog
from .disk_conditions import DiskConditions
from .durable_file import drop_unsynced_entries, fsync_directory, write_durably
from .flusher import Flusher
from .log import PartitionLog
from .log_config import TOPIC_CONFIGS, ConfigError, LogConfig, validate_topic_config
from .producer_state import write_snapshot_data
from .torn import tear_small_file

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".txbroker_cleanshutdown"
CHECKPOINT_FILES = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
TOPICS_FILE = "topics.json"
MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_PARTITION_DIR = re.compile(r"^([a-zA-Z0-9._-]+)-(\d+)$")
# Partitions one creation hands to a worker thread at a time: the event loop takes its
# turn between chunks, and a failure rolls back the chunks already built.
CREATE_CHUNK = 256
# How soon after a flush round the recovery points are checkpointed, and how often the
# checkpoints are written when nothing moves (log start offsets; Kafka's interval is
# log.flush.offset.checkpoint.interval.ms, 60 s, but it revalidates more at a start).
RECOVERY_CHECKPOINT_INTERVAL_S = 0.25
CHECKPOINT_INTERVAL_S = 5.0
# A partition's producer state is snapshotted with the checkpoint once this much was
# appended since its last snapshot: bounds the replay after an unclean shutdown.
PRODUCER_SNAPSHOT_BYTES = 16 << 20


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
    """Kafka's format: version 0, the row count, one row per line. Parsed strictly
    (count, last newline, every row) because a torn file cut or zero-filled at a row
    boundary still parses: such a file is ignored whole and the partitions recover
    from their logs (start offsets from their first segment)."""
    result: dict[tuple[str, int], int] = {}
    try:
        with open(path, "rb") as f:
            text = f.read().decode()
    except FileNotFoundError:
        return result
    except UnicodeDecodeError:
        text = ""
    lines = text.split("\n")
    try:
        if lines[0] != "0" or lines.pop() != "" or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad header, count or last line")
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            if not _LEGAL_TOPIC.match(topic) or int(partition) < 0 or int(offset) < 0:
                raise ValueError(f"bad row {line!r}")
            result[(topic, int(partition))] = int(offset)
    except (ValueError, IndexError) as e:
        log.warning("ignoring torn or malformed checkpoint file %s (%s): recovering from "
                    "the logs", path, e)
        return {}
    return result


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
        # ENOSPC/EROFS/EIO of the broker's writes, as conditions (storage/disk_conditions.py).
        self.disk = DiskConditions(self.data_dir)
        self.cleaner = LogCleaner(os.path.join(self.data_dir, CLEANER_CHECKPOINT_FILE),
                                  backoff_ms=cleaner_backoff_ms)
        self._lock_fd = -1
        self._tasks: list[asyncio.Task] = []
        self.was_clean_shutdown = False
        self.new_data_dir = False
        self._creating: asyncio.Lock | None = None  # one creation at a time (Kafka's controller)
        self._pending_partitions = 0  # being built by a creation, not yet in self.logs
        # Checkpoints are written in worker threads: one at a time, in capture order.
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_seq = 0  # checkpoints captured
        self._checkpoint_written = 0  # the newest of them written
        self._checkpoints_closed = False

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
        _raise_open_files_limit()
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
        self._remove_orphan_partitions()
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
        how = ("new data directory" if self.new_data_dir
               else "clean shutdown" if self.was_clean_shutdown else "unclean shutdown")
        log.info("opened %d topic(s), %d partition(s) in %s (%s)", len(self.topics),
                 len(self.logs), self.data_dir, how)

    def _remove_orphan_partitions(self) -> None:
        """Delete partition directories topics.json does not list: what a creation that
        failed or crashed half-way left behind (topics.json is written last)."""
        orphans = []
        for name in os.listdir(self.data_dir):
            m = _PARTITION_DIR.match(name)
            if m is None or not os.path.isdir(os.path.join(self.data_dir, name)):
                continue
            info = self.topics.get(m.group(1))
            if info is None or int(m.group(2)) >= info.partitions:
                orphans.append(name)
        for name in orphans:
            doomed = os.path.join(self.data_dir, f"{name}.{uuid.uuid4().hex}-delete")
            os.rename(os.path.join(self.data_dir, name), doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        if orphans:
            log.warning("removed %d orphan partition director%s not in %s: %s%s", len(orphans),
                        "y" if len(orphans) == 1 else "ies", TOPICS_FILE,
                        ", ".join(sorted(orphans)[:10]), " ..." if len(orphans) > 10 else "")

    def _load_meta_properties(self) -> None:
        path = os.path.join(self.data_dir, "meta.properties")
        props: dict[str, str] = {}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if "=" in line and not line.startswith("#"):
                        k, v = line.strip().split("=", 1)
                        props[k] = v
        # No meta.properties yet: a brand-new data directory, not an unclean shutdown.
        self.new_data_dir = "cluster.id" not in props
        if "cluster.id" not in props:
            props["cluster.id"] = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            props["node.id"] = str(self.node_id)
            props["version"] = "1"
            write_durably(path, "".join(f"{k}={v}\n" for k, v in props.items()).encode())
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
        with self._checkpoint_lock:  # a checkpoint still running in a thread ends first
            self._checkpoints_closed = True
        await self.flusher.stop()
        for plog in self.logs.values():
            plog.close()
        self.write_checkpoints()
        offline = [plog.name for plog in self.logs.values() if plog.offline is not None]
        if offline:
            # Not a clean shutdown: the next start recovers every partition from its
            # recovery point, and the offline ones (a failed fsync) come back from what
            # their files hold, not from what this process believed.
            log.error("data directory %s not marked clean: %d partition(s) offline after a "
                      "failed fsync (%s)", self.data_dir, len(offline), ", ".join(offline[:10]))
        else:
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
                durable: Mapping[tuple[str, int], int] | None = None,
                torn_seed: int | None = None) -> None:
        """Fault injection's in-process crash: stop background work and close every file
        without flushing, checkpointing or leaving a clean-shutdown marker (what SIGKILL
        leaves behind: unflushed writes remain in the page cache).

        ``power_loss``: a power failure instead; every partition log is first cut back
        to what was fsynced (``PartitionLog.simulate_power_loss``), at the offsets of
        ``durable`` (from ``flushed_offsets()`` when the power went; default: now).
        ``torn_seed`` (with ``power_loss``): the disk tears the unsynced writes instead of
        dropping them (random pages persist, storage/torn.py), and each checkpoint file
        may be left half-written; the same seed tears the same way."""
        rng = None if torn_seed is None or not power_loss else random.Random(torn_seed)
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        with self._checkpoint_lock:  # nor a checkpoint
            self._checkpoints_closed = True
        self.flusher.abandon()  # no fsync round finishes after this
        if power_loss:
            drop_unsynced_entries(self.data_dir)
        if rng is not None:
            for name in CHECKPOINT_FILES:
                if rng.random() < 0.5 and tear_small_file(os.path.join(self.data_dir, name), rng):
                    log.warning("simulated power loss tore %s", name)
        for key, plog in sorted(self.logs.items()):
            if power_loss and not plog.closed:
                plog.simulate_power_loss(None if durable is None else durable.get(key), rng)
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

    def _save_topics(self, extra: Mapping[str, TopicInfo] | None = None) -> None:
        topics = dict(self.topics)
        topics.update(extra or {})
        data = {name: info.to_json() for name, info in sorted(topics.items())}
        write_durably(os.path.join(self.data_dir, TOPICS_FILE),
                      json.dumps(data, indent=1).encode())

    @property
    def partition_count(self) -> int:
        """Partitions on this broker, counting those a creation is building."""
        return len(self.logs) + self._pending_partitions

    def check_partition_limit(self, additional: int, max_partitions: int | None) -> None:
        """POLICY_VIOLATION if ``additional`` partitions would take this broker past
        ``max_partitions`` (``txbroker.max.partitions``; None or negative: no limit)."""
        if max_partitions is not None and max_partitions >= 0 and \
                self.partition_count + additional > max_partitions:
            raise TopicError(
                f"{additional} more partition(s) would exceed the broker's limit of "
                f"{max_partitions} (txbroker.max.partitions; {self.partition_count} exist)",
                ErrorCode.policy_violation)

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, str],
                        *, also: Mapping[str, object] = ()) -> None:
        """``also``: names of topics being created with this one (same request)."""
        validate_topic_name(name)
        if name in self.topics or name in also:
            raise TopicError(f"topic {name!r} already exists", ErrorCode.topic_already_exists)
        collision = name.replace(".", "_")
        for other in (*self.topics, *also):
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

    def _config_of(self, info: TopicInfo) -> LogConfig:
        values = dict(self.broker_defaults)
        values.update(info.configs)
        return LogConfig.from_values(values)

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
                     *, internal: bool = False, max_partitions: int | None = None) -> TopicInfo:
        """Create a topic on the calling thread (internal topics, auto-creation: few
        partitions). All or nothing: on an error its directories are removed."""
        configs = {k: v for k, v in (configs or {}).items() if v is not None}
        self.check_new_topic(name, partitions, configs)
        if not internal:
            self.check_partition_limit(partitions, max_partitions)
        info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs), internal)
        built = self._build_partitions(info, 0, partitions)
        self._commit_topics([(info, built)])
        log.info("created topic %s with %d partition(s) %s", name, partitions, configs or "")
        return info

    async def create_topics(self, specs: list[tuple[str, int, Mapping[str, str]]], *,
                            max_partitions: int | None = None,
                            validate_only: bool = False) -> dict[str, TopicInfo | KafkaError]:
        """Create topics (name, partitions, config overrides) of one CreateTopics request,
        building their directories in a worker thread so that other clients are served
        meanwhile. Per name: its TopicInfo, or the KafkaError that refused it. Nothing
        of a refused or failed topic stays on disk; topics.json is written once, last."""
        results: dict[str, TopicInfo | KafkaError] = {}
        async with self._creation_lock():
            planned: dict[str, TopicInfo] = {}
            wanted = 0
            for name, partitions, configs in specs:
                configs = {k: v for k, v in configs.items() if v is not None}
                try:
                    self.check_new_topic(name, partitions, configs, also=planned)
                    self.check_partition_limit(wanted + partitions, max_partitions)
                except KafkaError as e:
                    results[name] = e
                    continue
                wanted += partitions
                planned[name] = TopicInfo(name, uuid.uuid4(), partitions, configs)
            if validate_only:
                results.update(planned)
                return results
            built: list[tuple[TopicInfo, list[PartitionLog]]] = []
            self._pending_partitions += wanted
            try:
                for info in planned.values():
                    try:
                        logs = await self._build_off_loop(info, 0, info.partitions)
                    except OSError as e:
                        results[info.name] = _storage_error(f"creating topic {info.name!r}", e)
                        continue
                    if info.name in self.topics:  # auto-created meanwhile (Metadata)
                        self._discard(logs)
                        results[info.name] = TopicError(f"topic {info.name!r} already exists",
                                                        ErrorCode.topic_already_exists)
                        continue
                    built.append((info, logs))
            except BaseException:
                for _info, logs in built:
                    self._discard(logs)
                raise
            finally:
                self._pending_partitions -= wanted
            try:
                self._commit_topics(built)
            except OSError as e:
                for info, _logs in built:
                    results[info.name] = _storage_error(f"creating topic {info.name!r}", e)
                return results
            for info, _logs in built:
                results[info.name] = info
                log.info("created topic %s with %d partition(s) %s", info.name, info.partitions,
                         info.configs or "")
        return results

    def _creation_lock(self) -> asyncio.Lock:
        if self._creating is None:
            self._creating = asyncio.Lock()
        return self._creating

    async def _build_off_loop(self, info: TopicInfo, start: int,
                              end: int) -> list[PartitionLog]:
        """:meth:`_build_partitions` in a worker thread, CREATE_CHUNK partitions at a time."""
        loop = asyncio.get_running_loop()
        built: list[PartitionLog] = []
        try:
            for first in range(start, end, CREATE_CHUNK):
                last = min(first + CREATE_CHUNK, end)
                built += await loop.run_in_executor(None, self._build_partitions, info, first,
                                                    last)
        except BaseException:
            self._discard(built)
            raise
        return built

    def _build_partitions(self, info: TopicInfo, start: int, end: int) -> list[PartitionLog]:
        """Create and open the directories of partitions ``start`` to ``end`` (any thread:
        touches no shared state). All or nothing: on an error the ones made are removed."""
        config = self._config_of(info)
        built: list[PartitionLog] = []
        try:
            for p in range(start, end):
                directory = self._partition_dir(info.name, p)
                if os.path.exists(directory):  # leftovers of an older topic with this name
                    shutil.rmtree(directory)
                plog = PartitionLog(info.name, p, directory, config)
                built.append(plog)
                plog.open()
                with open(os.path.join(directory, "partition.metadata"), "w") as f:
                    f.write(f"version: 0\ntopic_id: {_kafka_uuid(info.topic_id)}\n")
            if built:  # the new directory entries must survive a crash too
                fsync_directory(self.data_dir)
        except BaseException:
            self._discard(built)
            raise
        return built

    def _discard(self, logs: list[PartitionLog]) -> None:
        """Close and delete partitions that were built but never registered. Every file
        is closed first: after EMFILE the removal itself needs descriptors."""
        for plog in logs:
            plog.closed = True
            for seg in plog.segments:
                seg.close()
        left = []
        for plog in logs:
            try:
                shutil.rmtree(plog.directory)
            except FileNotFoundError:
                pass
            except OSError as e:
                left.append(f"{plog.directory} ({e.strerror})")
        if left:  # not in topics.json: the next start removes them as orphans
            log.error("could not remove %d partition director%s of a failed creation: %s",
                      len(left), "y" if len(left) == 1 else "ies", ", ".join(left[:5]))

    def _commit_topics(self, built: list[tuple[TopicInfo, list[PartitionLog]]]) -> None:
        """Write topics.json with the new topics, then make them visible. If the write
        fails nothing is registered and the directories are removed."""
        if not built:
            return
        try:
            self._save_topics({info.name: info for info, _ in built})
        except BaseException:
            for _info, logs in built:
                self._discard(logs)
            raise
        for info, logs in built:
            self.topics[info.name] = info
            for plog in logs:
                self.logs[(info.name, plog.partition)] = plog
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

    def check_create_partitions(self, name: str, total: int) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.unknown_topic_or_partition)
        if total <= info.partitions:
            raise TopicError(
                f"topic {name!r} has {info.partitions} partitions; the new count must be larger, "
                f"got {total}", ErrorCode.invalid_partitions)
        return info

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                                max_partitions: int | None = None) -> None:
        """Grow a topic to ``total`` partitions, building the new ones in a worker thread.
        All or nothing: on an error the new directories are removed and the topic keeps
        its partition count (KAFKA_STORAGE_ERROR for an OSError)."""
        async with self._creation_lock():
            info = self.check_create_partitions(name, total)
            old = info.partitions
            self.check_partition_limit(total - old, max_partitions)
            if validate_only:
                return
            self._pending_partitions += total - old
            try:
                built = await self._build_off_loop(info, old, total)
            except OSError as e:
                raise _storage_error(f"creating partitions of {name!r}", e) from None
            finally:
                self._pending_partitions -= total - old
            if self.topics.get(name) is not info or info.partitions != old:  # deleted meanwhile
                self._discard(built)
                raise TopicError(f"unknown topic {name!r}", ErrorCode.unknown_topic_or_partition)
            info.partitions = total
            try:
                self._save_topics()
            except OSError as e:
                info.partitions = old
                self._discard(built)
                raise _storage_error(f"creating partitions of {name!r}", e) from None
            for plog in built:
                self.logs[(name, plog.partition)] = plog
                self.flusher.track(plog)
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
        """Checkpoint recovery points soon after flush rounds move them (an unclean
        start validates only what was written after them), and log start offsets."""
        last = time.monotonic()
        failures = ConditionLog(log, "writing checkpoints failed")
        retry_at = 0.0
        while True:
            await asyncio.sleep(RECOVERY_CHECKPOINT_INTERVAL_S)
            failures.tick()
            await self.disk.tick()
            if time.monotonic() < retry_at:
                continue
            moved = any(not p.closed and p.offline is None and p.flushed_offset != p.recovery_point
                        for p in self.logs.values())
            if not moved and time.monotonic() - last < CHECKPOINT_INTERVAL_S:
                continue
            try:
                await self.checkpoint_recovery_points()
                last = time.monotonic()
                failures.cleared()
            except OSError as e:
                # A failing disk (EIO, ENOSPC, ENOTCONN): a few lines while it lasts (the
                # data directory's condition for the expected errnos), no traceback, and
                # the next try after CHECKPOINT_INTERVAL_S, not at once.
                if not self.disk.refused(e, "checkpoint", self.data_dir):
                    failures.occurred(repr(e))
                retry_at = time.monotonic() + self.disk.retry_delay("checkpoint",
                                                                    CHECKPOINT_INTERVAL_S)
            except Exception:
                log.exception("writing checkpoints failed")

    async def checkpoint_recovery_points(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints off the event loop,
        with what an unclean start relies on below each recovery point made durable
        first: the index entries of the segment holding it, and a producer-state
        snapshot for partitions that grew by PRODUCER_SNAPSHOT_BYTES since the last
        one (so that the replay after a crash is bounded as well)."""
        points: list[tuple[PartitionLog, int]] = []
        sync_paths: list[str] = []
        snapshots: list[tuple[str, int, bytes]] = []
        for plog in list(self.logs.values()):
            if plog.closed:
                continue
            # An offline log's files are closed: its point stays where it was (what an
            # unclean start relies on below a newer one was never made durable).
            point = plog.flushed_offset if plog.offline is None else plog.recovery_point
            points.append((plog, point))
            if point == plog.recovery_point:
                continue
            sync_paths += plog.recovery_index_paths(point)
            if plog.bytes_since_snapshot >= PRODUCER_SNAPSHOT_BYTES:
                snapshots.append((plog.directory, *plog.producer_snapshot_data()))
        rows = ([(p.topic, p.partition, point) for p, point in points],
                [(p.topic, p.partition, p.log_start_offset) for p, _ in points])
        self._checkpoint_seq += 1
        await asyncio.get_running_loop().run_in_executor(
            None, self._write_recovery_checkpoint, self._checkpoint_seq, sync_paths, snapshots,
            rows)
        for plog, point in points:
            plog.recovery_point = max(plog.recovery_point, point)

    def _write_recovery_checkpoint(self, seq: int, sync_paths: list[str],
                                   snapshots: list[tuple[str, int, bytes]],
                                   rows: tuple[list, list]) -> None:
        """One checkpoint at a time (worker threads); after close or a crash, none. Rows
        captured before those already written are not written over them (a DeleteRecords
        checkpoint and the periodic one may finish in either order)."""
        with self._checkpoint_lock:
            if self._checkpoints_closed:
                return
            self._sync_for_checkpoint(sync_paths, snapshots)
            if seq > self._checkpoint_written:
                self._write_checkpoint_rows(rows)
                self._checkpoint_written = seq

    @staticmethod
    def _sync_for_checkpoint(sync_paths: list[str],
                             snapshots: list[tuple[str, int, bytes]]) -> None:
        for path in sync_paths:
            try:
                if os.path.isdir(path):
                    fsync_directory(path)
                    continue
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:  # deleted meanwhile (retention, a topic deletion)
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for directory, offset, data in snapshots:
            try:
                write_snapshot_data(directory, offset, data)
            except FileNotFoundError:
                pass

    def _checkpoint_rows(self) -> tuple[list, list]:
        logs = list(self.logs.values())
        recovery = [(p.topic, p.partition,
                     p.flushed_offset if p.offline is None else p.recovery_point) for p in logs]
        starts = [(p.topic, p.partition, p.log_start_offset) for p in logs]
        return recovery, starts

    def write_checkpoints(self) -> None:
        self._write_checkpoint_rows(self._checkpoint_rows())

    async def write_checkpoints_now(self) -> None:
        """The checkpoints, written off the event loop (DeleteRecords makes its new log
        start offsets durable before it answers)."""
        await self.checkpoint_recovery_points()

    def _write_checkpoint_rows(self, rows: tuple[list, list]) -> None:
        recovery, starts = rows
        for fname, rows in (("recovery-point-offset-checkpoint", recovery),
                            ("log-start-offset-checkpoint", starts)):
            text = f"0\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for t, p, o in rows)
            write_durably(os.path.join(self.data_dir, fname), text.encode())


def _storage_error(what: str, e: OSError) -> KafkaError:
    """An OSError (EMFILE, ENOSPC, EIO) while creating: Kafka's KAFKA_STORAGE_ERROR."""
    log.error("%s failed, rolled back: %r", what, e)
    return KafkaError(f"{what} failed: {e.strerror or e}", ErrorCode.kafka_storage_error)


def _raise_open_files_limit() -> None:
    """Each partition keeps its active segment open: take the hard RLIMIT_NOFILE as the
    soft one (what Kafka's operations guide asks of a broker's ulimit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft and (hard == resource.RLIM_INFINITY or hard > soft):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.info("open files limit raised from %d to %d", soft, hard)


def _kafka_uuid(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
