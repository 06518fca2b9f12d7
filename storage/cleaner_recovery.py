"""The files of a cleaning on disk, and the recovery of a cleaning a crash interrupted.

Why a module of its own: ``PartitionLog.open`` (log.py) must finish or undo an
interrupted swap before it lists its segments, and the cleaner (cleaner.py) works
on ``PartitionLog`` objects. With the recovery here, log.py imports this module,
which imports nothing of log.py or of the cleaner, and there is no import circle.

The swap protocol (written by ``LogCleaner._swap``, undone or completed here):
each group of cleaned segments is written as ``<base>.log.cleaned`` (+
``.index.cleaned``, ``.timeindex.cleaned`` and ``.txnindex.cleaned``, the group's
aborted transactions, always written, possibly empty) and fsynced in a worker
thread. On the event loop the files are renamed to ``.swap`` (the ``.log`` last: its
rename is the commit point), the replaced segments are closed and deleted (first to
last), the ``.swap`` files renamed to their final names (the ``.log`` last again),
the segment list and the in-memory aborted-transaction index updated.
``recover_interrupted_cleaning`` (called by PartitionLog.open) deletes ``*.cleaned``
leftovers and completes a swap whose ``.log.swap`` exists: it deletes every segment
file in the swap segment's offset range, renames the ``.txnindex.swap`` and then the
``.log.swap`` into place (the offset and time indexes are rebuilt on load). Because
the cleaned ``.txnindex`` moves with the cleaned ``.log`` through the same renames,
no crash can leave a cleaned segment next to the aborted-transaction entries of the
segments it replaced (an entry whose ABORT marker the cleaning removed would make a
read_committed consumer skip that producer's later, committed data) nor without its
own entries (a restart loads the entries below its producer snapshot from these
files only).
"""

from __future__ import annotations

import logging
import os

from txbroker.protocol.records import HEADER_SIZE, LOG_OVERHEAD, read_header

from .durable_file import fsync_directory
from .segment import filename_prefix

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
# Renamed in this order: the .txnindex before the .log, whose rename is the commit point.
WRITTEN_SUFFIXES = (".index", ".timeindex", ".txnindex", ".log")


def _stem_offset(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def _file_next_offset(path: str, base: int) -> int:
    """Offset after the last whole batch of a segment file (``base`` if none)."""
    next_offset = base
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            header = read_header(os.pread(f.fileno(), HEADER_SIZE, pos))
            if header.magic != 2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD or \
                    pos + header.size > size:
                break
            next_offset = header.last_offset + 1
            pos += header.size
    return next_offset


def recover_interrupted_cleaning(directory: str) -> None:
    """Finish or undo a cleaning that a crash interrupted (see the module docstring).

    ``*.cleaned`` files were never committed: deleted. A ``<base>.log.swap`` was
    committed: every segment file whose base offset lies in the swap segment's
    range is a replaced segment (deleted), then ``<base>.txnindex.swap`` and the
    swap become ``<base>.txnindex`` and ``<base>.log``. Offset and time index
    ``.swap`` files are deleted; the segment's indexes are rebuilt on load.

    The cleaned ``.txnindex`` cannot be rebuilt from its segment alone (an entry's
    first offset and last stable offset may lie before it), so it travels with the
    ``.log``: its ``.swap`` exists whenever the ``.log.swap`` does, unless the
    swap had already renamed it to ``<base>.txnindex``, which it does only after
    every replaced segment (their ``.txnindex`` files included) is deleted: that
    ``<base>.txnindex`` is then the cleaned one and stays."""
    names = os.listdir(directory)
    committed = {n[: -len(".log" + SWAP_SUFFIX)] for n in names
                 if n.endswith(".log" + SWAP_SUFFIX)}
    changed = False
    for name in names:
        keep = name.endswith(".txnindex" + SWAP_SUFFIX) and \
            name[: -len(".txnindex" + SWAP_SUFFIX)] in committed
        if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and not keep and
                                             not name.endswith(".log" + SWAP_SUFFIX)):
            os.unlink(os.path.join(directory, name))
            changed = True
    swaps = sorted(n for n in names if n.endswith(".log" + SWAP_SUFFIX) and _stem_offset(n) is not None)
    for name in swaps:
        base = _stem_offset(name)
        assert base is not None
        swap_path = os.path.join(directory, name)
        prefix = os.path.join(directory, filename_prefix(base))
        txn_swap = prefix + ".txnindex" + SWAP_SUFFIX
        txn_renamed = not os.path.exists(txn_swap)
        end = max(_file_next_offset(swap_path, base), base + 1)
        for other in os.listdir(directory):
            offset = _stem_offset(other)
            if offset is not None and base <= offset < end and other.endswith(SEGMENT_FILE_SUFFIXES):
                if txn_renamed and offset == base and other.endswith(".txnindex"):
                    continue  # the cleaned segment's, renamed into place before the crash
                os.unlink(os.path.join(directory, other))
        if not txn_renamed:
            os.replace(txn_swap, prefix + ".txnindex")
        os.replace(swap_path, prefix + ".log")
        log.warning("%s: completed an interrupted log cleaning swap at offset %d", directory, base)
        changed = True
    if changed:
        fsync_directory(directory)
