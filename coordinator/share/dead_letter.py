"""Dead-letter topics of share groups (KIP-1191, share.version 2): the records a share
group writes for the records it archives, as Kafka 4.4's ShareGroupDLQStateManager does.

Owns nothing durable. The share coordinator (``coordinator.py``) hands it the ARCHIVING
ranges of a share-partition once their state is durable; :class:`DeadLetterWriter`
checks the group's dead-letter topic (Kafka's checks and messages), creates it if
``errors.deadletterqueue.auto.create.topics.enable`` allows, reads the original records
if ``errors.deadletterqueue.copy.record.enable`` asks for them, appends one record per
offset and waits for the log's flush policy. It never raises: a failure is one log line,
and the records are archived regardless, as Kafka does.

A dead-letter record: timestamp now (CreateTime), the original key and value only with
copy.record.enable (the original headers never), and the headers ``__dlq.errors.topic``,
``.partition``, ``.offset``, ``.group``, ``.delivery.count`` and ``.message`` (UTF-8
text), in the partition ``source partition % partitions of the dead-letter topic``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from txbroker.protocol.errors import KafkaError
from txbroker.protocol.records import Record, build_batch, decode_records, iter_batches, read_header
from txbroker.storage.log import PartitionLog
from txbroker.storage.manager import LogManager

from ..shell import now_ms

__all__ = ["DeadLetterRange", "DeadLetterSettings", "DeadLetterWriter", "DLQ_ENABLE_TOPIC_CONFIG",
           "dead_letter_headers", "dead_letter_topic_problem", "REJECTED", "EXCEEDED"]

log = logging.getLogger(__name__)

DLQ_ENABLE_TOPIC_CONFIG = "errors.deadletterqueue.group.enable"  # Kafka's topic config
# Kafka's ShareGroupDLQManager causes, sent as __dlq.errors.message.
REJECTED = "Offset rejected by client."
EXCEEDED = "Offset delivery count exceeded the threshold."
_HEADER_ROOM = 1024  # a dead-letter record's headers and framing, beside key and value


@dataclass(frozen=True)
class DeadLetterSettings:
    """The broker keys (Kafka's GroupCoordinatorConfig names)."""

    topic_name_prefix: str = "dlq."  # errors.deadletterqueue.topic.name.prefix
    auto_create_topics: bool = False  # errors.deadletterqueue.auto.create.topics.enable
    new_topic_partitions: int = 1  # num.partitions: what an auto-created topic gets
    max_partitions: int | None = None  # txbroker.max.partitions


@dataclass(frozen=True)
class DeadLetterRange:
    """ARCHIVING offsets ``first_offset..last_offset`` of one share-partition."""

    first_offset: int
    last_offset: int
    delivery_count: int
    rejected: bool  # REJECTed by a client, else over the delivery count limit


def dead_letter_topic_problem(group_id: str, topic: str, prefix: str, *, exists: bool,
                              enabled_on_topic: bool, auto_create: bool) -> str | None:
    """Why Kafka's ProduceRequestHandler.validateDlqTopic refuses the group's dead-letter
    topic (its messages, in its order), or None."""
    if not topic:
        return f"Configured DLQ topic name in share group: {group_id} is empty."
    if topic.startswith("__"):
        return (f"Configured DLQ topic name in share group: {group_id} cannot start with __, "
                f"topic: {topic}.")
    if exists and not enabled_on_topic:
        return (f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, "
                f"topic: {topic}.")
    if not exists and not auto_create:
        return (f"DLQ topic does not exist and auto create is disabled on cluster for share "
                f"group: {group_id}, topic: {topic}.")
    if prefix and not topic.startswith(prefix):
        return (f"Configured DLQ topic name does not comply with the DLQ topic prefix in share "
                f"group: {group_id}, topic: {topic}, prefix: {prefix}.")
    return None


def dead_letter_headers(group_id: str, topic: str, partition: int, offset: int,
                        delivery_count: int, rejected: bool) -> list[tuple[str, bytes | None]]:
    """Kafka's headers of the dead-letter record of ``offset``, in its order."""
    return [("__dlq.errors.topic", topic.encode()),
            ("__dlq.errors.partition", str(partition).encode()),
            ("__dlq.errors.offset", str(offset).encode()),
            ("__dlq.errors.group", group_id.encode()),
            ("__dlq.errors.delivery.count", str(delivery_count).encode()),
            ("__dlq.errors.message", (REJECTED if rejected else EXCEEDED).encode())]


def _originals(plog: PartitionLog, ranges: Sequence[DeadLetterRange], max_bytes: int
               ) -> Iterator[tuple[int, Record | None]]:
    """(offset, its record or None) for every offset of ``ranges`` (sorted), reading the
    log ``max_bytes`` at a time: the memory held is one read, whatever the ranges span."""
    pos = ranges[0].first_offset
    end = ranges[-1].last_offset + 1
    wanted = iter([o for r in ranges for o in range(r.first_offset, r.last_offset + 1)])
    nxt = next(wanted, None)
    while nxt is not None:
        found: dict[int, Record] = {}
        pos = max(pos, nxt, plog.log_start_offset)
        read = plog.read(pos, max_bytes, max_offset=min(end, plog.high_watermark), min_one=True)
        if not read.data:
            break
        data = bytes(read.data)
        for at, header in iter_batches(data):
            if header.is_control or header.last_offset < nxt:
                continue
            try:
                found.update((r.offset, r) for r in decode_records(data, at))
            except (KafkaError, ValueError, OSError) as e:
                log.warning("cannot read the record batch at offset %d of %s for a "
                            "dead-letter record: %r; its records get headers only",
                            header.base_offset, plog.name, e)
        while nxt is not None and nxt < read.next_offset:
            yield nxt, found.get(nxt)
            nxt = next(wanted, None)
        pos = read.next_offset
    while nxt is not None:  # past what the log still has
        yield nxt, None
        nxt = next(wanted, None)


class DeadLetterWriter:
    """Writes a share-partition's dead-letter records (see the module docstring)."""

    def __init__(self, logs: LogManager, settings: DeadLetterSettings) -> None:
        self.logs = logs
        self.settings = settings

    def _topic(self, group_id: str, topic: str) -> tuple[str, int] | str:
        """The dead-letter topic's name and partition count, created if it may be; or
        why not."""
        info = self.logs.topics.get(topic)
        enabled = info is not None and \
            info.configs.get(DLQ_ENABLE_TOPIC_CONFIG, "false").lower() == "true"
        problem = dead_letter_topic_problem(
            group_id, topic, self.settings.topic_name_prefix, exists=info is not None,
            enabled_on_topic=enabled, auto_create=self.settings.auto_create_topics)
        if problem is not None:
            return problem
        if info is None:
            # As Kafka's CreateTopics of the dead-letter topic: marked as one, CreateTime.
            try:
                info = self.logs.create_topic(
                    topic, self.settings.new_topic_partitions,
                    {DLQ_ENABLE_TOPIC_CONFIG: "true", "message.timestamp.type": "CreateTime"},
                    max_partitions=self.settings.max_partitions)
            except (KafkaError, OSError) as e:
                return f"Unable to create DLQ topic for {group_id} using DLQ topic {topic}: {e}"
        return topic, info.partitions

    async def write(self, group_id: str, topic: str, partition: int, source: PartitionLog | None,
                    ranges: Sequence[DeadLetterRange], *, dlq_topic: str, copy_record: bool
                    ) -> int:
        """Write one dead-letter record per offset of ``ranges`` (sorted, of
        ``topic``-``partition``, whose log is ``source``) to ``dlq_topic``; the records
        written (0 on a failure, logged)."""
        if not ranges:
            return 0
        where = self._topic(group_id, dlq_topic)
        if isinstance(where, str):
            log.error("share group %r: no dead-letter records for %s-%d offsets %d-%d: %s "
                      "(archived regardless)", group_id, topic, partition,
                      ranges[0].first_offset, ranges[-1].last_offset, where)
            return 0
        name, partitions = where
        target = self.logs.get_log(name, partition % partitions)
        if target is None:
            log.error("share group %r: dead-letter topic %s has no partition %d (archived "
                      "regardless)", group_id, name, partition % partitions)
            return 0
        try:
            return await self._append(group_id, topic, partition, source, ranges, target,
                                      copy_record)
        except (KafkaError, OSError) as e:
            log.error("share group %r: cannot write the dead-letter records of %s-%d offsets "
                      "%d-%d to %s: %r (archived regardless)", group_id, topic, partition,
                      ranges[0].first_offset, ranges[-1].last_offset, target.name, e)
            return 0

    async def _append(self, group_id: str, topic: str, partition: int,
                      source: PartitionLog | None, ranges: Sequence[DeadLetterRange],
                      target: PartitionLog, copy_record: bool) -> int:
        max_bytes = target.config.max_message_bytes
        info = _RangeLookup(ranges)
        if copy_record and source is not None:
            originals: Iterator[tuple[int, Record | None]] = _originals(source, ranges, max_bytes)
        else:
            originals = ((o, None) for r in ranges for o in range(r.first_offset, r.last_offset + 1))
        now = now_ms()
        pending: list[Record] = []
        size = 0
        written = 0
        last = -1

        def flush_batch() -> None:
            nonlocal pending, size, written, last
            if pending:
                batch = bytearray(build_batch(pending, base_timestamp=now))
                last = target.append(batch, read_header(batch)).last_offset
                written += len(pending)
                pending, size = [], 0

        for offset, original in originals:
            r = info.of(offset)
            key = value = None
            if original is not None:
                if len(original.key or b"") + len(original.value or b"") + _HEADER_ROOM <= max_bytes:
                    key, value = original.key, original.value
                else:  # Kafka skips a record that can never fit: headers only
                    log.warning("record %s-%d@%d is too large for dead-letter topic %s: its "
                                "dead-letter record gets headers only", topic, partition,
                                offset, target.name)
            rec = Record(key, value, dead_letter_headers(group_id, topic, partition, offset,
                                                         r.delivery_count, r.rejected), now)
            rec_size = len(key or b"") + len(value or b"") + _HEADER_ROOM
            if pending and size + rec_size > max_bytes:
                flush_batch()
            pending.append(rec)
            size += rec_size
        flush_batch()
        if last >= 0:
            await self.logs.flusher.wait_acked(target, last + 1)
        return written


class _RangeLookup:
    """The range of an offset, for offsets asked in increasing order."""

    def __init__(self, ranges: Sequence[DeadLetterRange]) -> None:
        self._ranges = ranges
        self._i = 0

    def of(self, offset: int) -> DeadLetterRange:
        while self._ranges[self._i].last_offset < offset:
            self._i += 1
        return self._ranges[self._i]
