"""Snapshots of one ``__transaction_state`` partition: the latest record of every
transactional id in it, up to an offset, so that loading replays only the records
after that offset instead of the partition's whole history.

File: ``<partition dir>/coordinator.state`` (msgpack, after a 0xC1 byte and its CRC32
so that a torn file is detected; older files without them load too), written durably
(temporary file, fsync, rename, directory fsync) and only once every record below its offset
is fsynced, so a snapshot never holds a record a crash could take back from the
log. A missing, unreadable or unusable snapshot (offset outside the log) means a
full replay of the partition: data directories from before snapshots load as
before, and the first load writes them.

Layout: ``{"version": 1, "offset": N, "rows": [[transactional_id, producer_id,
previous_producer_id, next_producer_id, producer_epoch, last_producer_epoch,
timeout_ms, state_id, [[topic, partition], ...], txn_start_ms, last_update_ms,
[[topic, partition, first_offset], ...] or None, client_transaction_version], ...]}``.
Rows of 12 elements (written before transactions v2) load with version 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import msgpack
from txbroker.storage.durable_file import checked_body, with_checksum, write_durably

from .records import PERSISTED_STATES, TxnLogValue

SNAPSHOT_FILE = "coordinator.state"
SNAPSHOT_VERSION = 1


Row = list  # [transactional_id, producer_id, ..., first offsets] as in the layout above


def row_of(transactional_id: str, v: TxnLogValue) -> Row:
    """The snapshot row of a record (kept per id by the coordinator until written)."""
    return [transactional_id, v.producer_id, v.previous_producer_id, v.next_producer_id,
            v.producer_epoch, v.last_producer_epoch, v.timeout_ms, PERSISTED_STATES[v.state],
            [[t, p] for t, p in sorted(v.partitions)], v.txn_start_ms, v.last_update_ms,
            None if v.txn_first_offsets is None
            else [[t, p, o] for (t, p), o in sorted(v.txn_first_offsets.items())],
            v.client_transaction_version]


def encode_snapshot(offset: int, rows: Iterable[Row]) -> bytes:
    return with_checksum(msgpack.packb(
        {"version": SNAPSHOT_VERSION, "offset": offset, "rows": list(rows)}, use_bin_type=True))


def decode_snapshot(data: bytes) -> tuple[int, list[Row]]:
    """(offset, rows); ValueError if it is not a snapshot this version reads. Rows are
    checked for shape here and for content by ``TransactionCoordinatorState.load_row``."""
    try:
        raw = msgpack.unpackb(checked_body(data), raw=False)
        if raw["version"] != SNAPSHOT_VERSION:
            raise ValueError(f"unknown snapshot version {raw['version']!r}")
        rows = raw["rows"]
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) in (12, 13)
                                                 for r in rows):
            raise ValueError("malformed rows")
        return int(raw["offset"]), rows
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
        raise ValueError(f"unreadable transaction coordinator snapshot: {e!r}") from None


def snapshot_path(directory: str) -> str:
    return os.path.join(directory, SNAPSHOT_FILE)


def read_snapshot(directory: str) -> tuple[int, list[Row]] | None:
    """The partition's snapshot, or None if it has none. ValueError if unreadable."""
    try:
        with open(snapshot_path(directory), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode_snapshot(data)


def write_snapshot(directory: str, offset: int, rows: list[Row]) -> None:
    """Encode and write durably (any thread: ``rows`` is a private copy)."""
    write_durably(snapshot_path(directory), encode_snapshot(offset, rows))
