"""Positive evidence that a share-partition's records are decided: its start offset
(DescribeShareGroupOffsets) moves past a record only once the record is ACKNOWLEDGED or
ARCHIVED (an ARCHIVING record waits for its dead-letter record first), and such a record
is never delivered again. Tests wait for it instead of polling for "nothing more"."""

from __future__ import annotations

import time

from tests.integration.test_share_group_offsets import describe, spso


def wait_start_offset(broker, group: str, topic: str, offset: int, consumer=None,
                      timeout: float = 30) -> None:
    """Until partition 0 of ``topic`` starts at ``offset`` in ``group``; ``consumer`` (a
    ShareConsumer of the group) polls meanwhile (a fetch loads the share-partition after
    a restart) and must get nothing."""
    deadline = time.monotonic() + timeout
    while (got := spso(describe(broker, group))) != {(topic, 0): offset}:
        assert time.monotonic() < deadline, got
        if consumer is None:
            time.sleep(0.05)
        else:
            msgs = [m for m in consumer.poll(0.2) if m.error() is None]
            assert msgs == [], [(m.offset(), m.delivery_count()) for m in msgs]
