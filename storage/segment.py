"""One log segment: ``<base>.log`` plus sparse ``.index`` and ``.timeindex``.

The ``.log`` file is the concatenation of record batches exactly as served to
consumers. Index formats follow Kafka: ``.index`` entries are (relative offset
i32, position i32) of 8 bytes, ``.timeindex`` entries are (timestamp i64,
relative offset i32) of 12 bytes. Indexes are rebuildable from the log, so they
are fsynced only when the segment is closed.

File descriptors: a segment's indexes live in memory and are written whole when it
is rolled, recovered or closed, so no index file stays open. The active segment's
``.log`` stays open; a rolled segment's ``.log`` is opened on demand and kept in a
process-wide LRU of at most ``max_open`` files (:data:`ROLLED_SEGMENT_FILES`), so
the descriptors a broker holds grow with its partitions, not with their segments.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import struct
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass

from txbroker.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    iter_batches,
    read_header,
)

from .durable_file import note_new_entry

log = logging.getLogger(__name__)

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
SCAN_CHUNK = 256 * 1024


def filename_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


class RolledSegmentFiles:
    """Open ``.log`` files of rolled segments, closed least recently used first once
    more than ``max_open`` are open. Only segments handed over with :meth:`adopt`
    (rolled ones) are counted; the active segment of a partition keeps its file."""

    def __init__(self, max_open: int = 256) -> None:
        self.max_open = max_open
        self._lru: OrderedDict[LogSegment, None] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def adopt(self, seg: LogSegment) -> None:
        with self._lock:
            seg._pooled = True
            if seg._fd >= 0:
                self._lru[seg] = None
                self._lru.move_to_end(seg)
            self._evict()

    def used(self, seg: LogSegment) -> None:
        with self._lock:
            if seg._fd >= 0:
                self._lru[seg] = None
                self._lru.move_to_end(seg)
            self._evict()

    def forget(self, seg: LogSegment) -> None:
        with self._lock:
            self._lru.pop(seg, None)

    def _evict(self) -> None:
        while len(self._lru) > max(self.max_open, 1):
            victim, _ = self._lru.popitem(last=False)
            fd, victim._fd = victim._fd, -1
            if fd >= 0:
                os.close(fd)
                self.evictions += 1


ROLLED_SEGMENT_FILES = RolledSegmentFiles()


@dataclass(slots=True)
class ReadResult:
    data: bytes | memoryview  # whole batches; a view of a longer read
    first_offset: int  # base offset of the first batch returned (-1 if none)
    next_offset: int  # offset after the last batch returned


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int = 4096,
                 *, create: bool = False) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = os.path.join(directory, filename_prefix(base_offset))
        self.log_path = prefix + ".log"
        self.index_path = prefix + ".index"
        self.timeindex_path = prefix + ".timeindex"
        flags = os.O_RDWR | os.O_CREAT
        if create:
            flags |= os.O_EXCL
        self._pooled = False  # rolled: the file is opened on demand (ROLLED_SEGMENT_FILES)
        self._fd = os.open(self.log_path, flags, 0o644)
        if create:
            note_new_entry(self.log_path)  # durable once the directory is fsynced
        try:
            st = os.fstat(self._fd)
        except OSError:
            os.close(self._fd)
            raise
        self.size = st.st_size
        self._index_rel = array("i")
        self._index_pos = array("i")
        self._time_ts = array("q")
        self._time_rel = array("i")
        self._index_written = 0  # index entries already in the .index file
        self._time_written = 0
        self._bytes_since_index = 0
        self.next_offset = base_offset  # offset after the last batch in this segment
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self.created_ms = int(st.st_mtime * 1000) if self.size else None
        self.closed = False

    @property
    def fd(self) -> int:
        """The ``.log`` file's descriptor, reopened if the LRU of rolled segments closed
        it. Use it at once: a later open of another rolled segment may close it again."""
        fd = self._fd
        if fd < 0:
            if self.closed:
                raise OSError(errno.EBADF, f"segment {self.log_path} is closed")
            fd = self._fd = os.open(self.log_path, os.O_RDWR)
        if self._pooled:
            ROLLED_SEGMENT_FILES.used(self)
            if self._fd < 0:  # max_open of 0 or 1 evicted it again: keep it for this use
                fd = self._fd = os.open(self.log_path, os.O_RDWR)
        return fd

    def release_file(self) -> None:
        """The segment was rolled: its ``.log`` may be closed until it is read again."""
        ROLLED_SEGMENT_FILES.adopt(self)

    # --- opening -------------------------------------------------------------

    def write_indexes(self, *, fsync: bool = False) -> None:
        """Write the in-memory indexes to the ``.index`` / ``.timeindex`` files: only the
        entries not written yet, unless the files were cut or rebuilt. Called for every
        moved partition at each recovery checkpoint (4 a second under load), so the
        cost follows the new entries: nothing at all when there are none."""
        for path, first, second, done, pack, entry in (
            (self.index_path, self._index_rel, self._index_pos, "_index_written",
             _INDEX_ENTRY.pack, 8),
            (self.timeindex_path, self._time_ts, self._time_rel, "_time_written",
             _TIME_ENTRY.pack, 12),
        ):
            already, count = getattr(self, done), len(first)
            if already == count and not fsync:
                continue
            try:
                fd = os.open(path, os.O_WRONLY)
            except FileNotFoundError:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                note_new_entry(path)
            try:
                if not 0 <= already <= count or os.fstat(fd).st_size != already * entry:
                    already = 0  # not what this segment wrote: rewrite it whole
                    os.ftruncate(fd, 0)
                if already < count:
                    data = b"".join(pack(a, b) for a, b in zip(
                        first[already:], second[already:], strict=True))
                    os.pwrite(fd, data, already * entry)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            setattr(self, done, count)

    def _drop_index_files(self) -> None:
        for path in (self.index_path, self.timeindex_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._index_written = self._time_written = 0

    def load(self) -> None:
        """Open a closed segment that was written cleanly: trust its indexes if they fit."""
        if not self._load_indexes() or not self._indexes_ordered():
            self.recover()
            return
        # The last batch gives next_offset; a short scan from the last index entry finds it.
        start = self._index_pos[-1] if len(self._index_pos) else 0
        last: BatchHeader | None = None
        for _pos, header in self._scan(start):
            last = header
            if self.first_batch_timestamp is None and _pos == 0:
                self.first_batch_timestamp = header.max_timestamp
        if last is not None:
            self.next_offset = last.last_offset + 1
        if self.first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self.first_batch_timestamp = read_header(os.pread(self.fd, HEADER_SIZE, 0)).max_timestamp
        if len(self._time_ts):
            self.max_timestamp = self._time_ts[-1]
            self.offset_of_max_timestamp = self.base_offset + self._time_rel[-1]
        if last is not None and last.max_timestamp > self.max_timestamp:
            self.max_timestamp = last.max_timestamp
            self.offset_of_max_timestamp = last.last_offset

    def _load_indexes(self) -> bool:
        try:
            with open(self.index_path, "rb") as f:
                raw = f.read()
            with open(self.timeindex_path, "rb") as f:
                traw = f.read()
        except FileNotFoundError:
            return False
        if len(raw) % 8 or len(traw) % 12:
            return False
        for rel, pos in _INDEX_ENTRY.iter_unpack(raw):
            if pos >= self.size or rel < 0:
                return False
            self._index_rel.append(rel)
            self._index_pos.append(pos)
        for ts, rel in _TIME_ENTRY.iter_unpack(traw):
            self._time_ts.append(ts)
            self._time_rel.append(rel)
        self._index_written = len(self._index_rel)
        self._time_written = len(self._time_ts)
        return True

    def _indexes_ordered(self) -> bool:
        """Entries strictly increasing, as written: a torn index file (zeros where a
        page never reached the disk, e.g. a rolled segment's index written after its
        data was fsynced) must not be trusted."""
        rel, pos, ts, trel = self._index_rel, self._index_pos, self._time_ts, self._time_rel
        if not (all(rel[i] < rel[i + 1] and pos[i] < pos[i + 1] for i in range(len(rel) - 1))
                and all(ts[i] < ts[i + 1] and trel[i] <= trel[i + 1]
                        for i in range(len(ts) - 1))):
            log.warning("%s: index entries out of order (torn?): rebuilding them", self.log_path)
            return False
        return True

    def recover_from(self, recovery_point: int) -> int:
        """:meth:`recover` for the segment holding ``recovery_point``: everything below
        it was fsynced, and so were the index entries of that part (the checkpoint
        that recorded the recovery point is written after their fsync, see
        ``LogManager``). Those entries are kept and only the batches from the last of
        them on are validated: the cost follows what was written since the last
        durable point, not the segment's size. Entries at or above the recovery point
        (maybe never fsynced) are ignored; an index that does not check out falls
        back to validating the whole segment. Returns the bytes truncated."""
        trusted = self._trusted_index(recovery_point)
        if trusted is None:
            return self.recover()
        pos, next_offset = trusted
        return self._validate(pos, next_offset)

    def _trusted_index(self, recovery_point: int) -> tuple[int, int] | None:
        """Load the index entries below ``recovery_point``; (position, offset) of the
        last batch they name, checked against the log, or None if none is usable."""
        self.first_batch_timestamp = None
        if not self._load_indexes():
            return None
        limit = recovery_point - self.base_offset
        n = 0
        while n < len(self._index_rel) and self._index_rel[n] < limit and \
                (n == 0 or (self._index_rel[n] > self._index_rel[n - 1]
                            and self._index_pos[n] > self._index_pos[n - 1])):
            n += 1
        del self._index_rel[n:], self._index_pos[n:]
        t = 0
        while t < len(self._time_rel) and 0 <= self._time_rel[t] < limit and \
                (t == 0 or self._time_ts[t] >= self._time_ts[t - 1]):
            t += 1
        del self._time_ts[t:], self._time_rel[t:]
        if n == 0:
            return None
        pos = self._index_pos[-1]
        head = os.pread(self.fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE:
            return None
        header = read_header(head)
        if header.magic != 2 or header.last_offset != self.base_offset + self._index_rel[-1] \
                or pos + header.size > self.size:
            return None
        first = read_header(os.pread(self.fd, HEADER_SIZE, 0))
        self.first_batch_timestamp = first.max_timestamp
        if len(self._time_ts):
            self.max_timestamp = self._time_ts[-1]
            self.offset_of_max_timestamp = self.base_offset + self._time_rel[-1]
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        # The last trusted batch is whole and below the recovery point: carry on after it.
        self._bytes_since_index = header.size
        return pos + header.size, header.last_offset + 1

    def recover(self, expected_base: int | None = None) -> int:
        """Validate every batch (lengths, magic, CRC, offsets), cut off a torn or corrupt
        tail, and rebuild the indexes. Returns the number of bytes truncated."""
        self._index_rel = array("i")
        self._index_pos = array("i")
        self._time_ts = array("q")
        self._time_rel = array("i")
        self._bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        expected = self.base_offset if expected_base is None else expected_base
        return self._validate(0, expected)

    def _validate(self, pos: int, expected: int) -> int:
        """Validate the batches from ``pos`` (the next expected at offset ``expected``),
        adding their index entries; cut off what fails."""
        valid_end = pos
        reason = ""
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                reason = f"partial batch header ({len(head)} bytes)"
                break
            header = read_header(head)
            if header.magic != 2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                reason = f"bad magic {header.magic} or length {header.batch_length}"
                break
            if pos + header.size > self.size:
                reason = f"partial batch ({self.size - pos} of {header.size} bytes)"
                break
            if header.base_offset < expected or header.last_offset_delta < 0:
                reason = f"offset {header.base_offset} below expected {expected}"
                break
            data = os.pread(self.fd, header.size, pos)
            if compute_crc(data, 0, header.size) != header.crc:
                reason = "CRC mismatch"
                break
            self._note_appended(pos, header)
            expected = header.last_offset + 1
            pos += header.size
            valid_end = pos
        truncated = self.size - valid_end
        if truncated:
            log.warning("%s: truncating %d bytes at position %d: %s", self.log_path,
                        truncated, valid_end, reason)
            os.ftruncate(self.fd, valid_end)
            os.fsync(self.fd)
            self.size = valid_end
        self.next_offset = max(expected, self.base_offset)
        # Rebuilt indexes replace the files; an empty segment (a new partition) needs none.
        self._index_written = self._time_written = -1  # forces a rewrite
        if self.size:
            # fsynced: a later start trusts the indexes of the part below its recovery
            # point (load, recover_from), which may now include this segment.
            self.write_indexes(fsync=True)
        else:
            self._drop_index_files()
        return truncated

    # --- appending -------------------------------------------------------------

    @property
    def rolling_base_ms(self) -> int | None:
        """segment.ms is measured from the first batch's timestamp (as Kafka does),
        or from when the segment got its first batch if that has no timestamp."""
        if self.first_batch_timestamp is not None and self.first_batch_timestamp > 0:
            return self.first_batch_timestamp
        return self.created_ms

    def _note_appended(self, position: int, header: BatchHeader) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if self.created_ms is None:
            self.created_ms = int(time.time() * 1000)
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index > self.index_interval_bytes or position == 0:
            rel = header.last_offset - self.base_offset
            self._index_rel.append(rel)
            self._index_pos.append(position)
            if not len(self._time_ts) or self.max_timestamp > self._time_ts[-1]:
                trel = self.offset_of_max_timestamp - self.base_offset
                self._time_ts.append(self.max_timestamp)
                self._time_rel.append(trel)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size

    def append(self, data: bytes | bytearray | memoryview, header: BatchHeader,
               first_bytes: bytes | None = None) -> int:
        """Write one batch (offsets already assigned) at the end; returns its position.
        ``first_bytes``: the batch's base offset field as stored, written in place of
        the first bytes of ``data`` (which then still holds the producer's)."""
        position = self.size
        view = memoryview(data)
        size = len(view)
        if first_bytes is None:
            written = os.pwrite(self.fd, view, position)
        else:
            written = os.pwritev(self.fd, (first_bytes, view[len(first_bytes):]), position)
        while written < size:  # a short write: the rest, from where it stopped
            if first_bytes is not None and written < len(first_bytes):
                written += os.pwrite(self.fd, first_bytes[written:], position + written)
            else:
                written += os.pwrite(self.fd, view[written:], position + written)
        self.size += size
        self._note_appended(position, header)
        self.next_offset = header.last_offset + 1
        return position

    def index_bytes_below(self, offset: int) -> tuple[int, int]:
        """Bytes of the ``.index`` and ``.timeindex`` entries naming offsets below
        ``offset`` (fault injection: what a checkpoint made durable)."""
        limit = offset - self.base_offset
        return (_INDEX_ENTRY.size * sum(1 for rel in self._index_rel if rel < limit),
                _TIME_ENTRY.size * sum(1 for rel in self._time_rel if rel < limit))

    def index_full(self, max_index_bytes: int) -> bool:
        return (len(self._index_rel) + 1) * 8 > max_index_bytes

    def index_entries(self) -> int:
        return len(self._index_rel)

    # --- reading ---------------------------------------------------------------

    def _scan(self, position: int, end: int | None = None):
        """Yield (position, header) for whole batches from ``position``."""
        end = self.size if end is None else end
        while position < end:
            chunk = os.pread(self.fd, min(SCAN_CHUNK, end - position), position)
            if len(chunk) < HEADER_SIZE:
                return
            advanced = 0
            for rel_pos, header in iter_batches(chunk):
                yield position + rel_pos, header
                advanced = rel_pos + header.size
            if advanced == 0:
                # A single batch larger than the chunk: read its header alone.
                header = read_header(chunk)
                if position + header.size > end or header.size <= 0:
                    return
                yield position, header
                advanced = header.size
            position += advanced

    def position_of(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= ``offset``."""
        i = bisect.bisect_right(self._index_rel, offset - self.base_offset) - 1
        start = self._index_pos[i] if i >= 0 else 0
        for pos, header in self._scan(start):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> ReadResult:
        """Whole batches from the one holding ``offset``, below ``max_offset`` (exclusive),
        at most ``max_bytes`` unless ``min_one`` and the first batch alone is larger."""
        found = self.position_of(offset)
        if found is None:
            return ReadResult(b"", -1, offset)
        start, first = found
        if first.base_offset >= max_offset:
            return ReadResult(b"", -1, offset)
        want = max(max_bytes, first.size) if min_one else max_bytes
        want = min(want, self.size - start)
        if first.size > want:
            return ReadResult(b"", -1, offset)
        # One read for the whole range, then cut at the last whole batch below max_offset.
        data = os.pread(self.fd, want, start)
        end = 0
        next_offset = offset
        for rel, header in iter_batches(data, self._walk_from(start, data, max_offset)):
            if header.base_offset >= max_offset:
                break
            end = rel + header.size
            next_offset = header.last_offset + 1
        if end == 0:
            return ReadResult(b"", -1, offset)
        # A view, not a copy, when the read ends mid-batch: megabytes per Fetch.
        return ReadResult(data if end == len(data) else memoryview(data)[:end],
                          first.base_offset, next_offset)

    def _walk_from(self, start: int, data: bytes, max_offset: int) -> int:
        """Where in ``data`` (read at ``start``) the walk for its end may begin: at the
        last indexed batch that is whole in ``data`` and below ``max_offset`` (every batch
        before it is too), not at 0 — a megabyte of one-record batches is ~13,000
        headers, the stretch after an index entry some index.interval.bytes."""
        j = min(bisect.bisect_right(self._index_pos, start + len(data)),
                bisect.bisect_left(self._index_rel, max_offset - self.base_offset)) - 1
        while j >= 0 and self._index_pos[j] > start:
            rel = self._index_pos[j] - start
            if len(data) - rel >= HEADER_SIZE and rel + read_header(data, rel).size <= len(data):
                return rel
            j -= 1  # the indexed batch runs past the read: the one before
        return 0

    def batches(self, start_position: int = 0):
        """All (position, header) of this segment, for look-ups that scan."""
        return self._scan(start_position)

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def lookup_timestamp(self, timestamp: int) -> int:
        """A position from which to scan for the first record with ts >= ``timestamp``."""
        i = bisect.bisect_left(self._time_ts, timestamp) - 1
        if i < 0:
            return 0
        found = self.position_of(self.base_offset + self._time_rel[i])
        return found[0] if found else 0

    # --- durability and lifecycle ------------------------------------------------

    def dup_fds(self, *, indexes: bool) -> list[int]:
        """Descriptors of this segment's files for an fsync elsewhere (the caller closes
        them). All or none: on EMFILE nothing is left open."""
        fds = [os.dup(self.fd)]
        try:
            if indexes:
                for path in (self.index_path, self.timeindex_path):
                    try:
                        fds.append(os.open(path, os.O_RDONLY))
                    except FileNotFoundError:
                        pass  # an empty segment has no index files
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def flush_indexes(self) -> None:
        """Write the index files and fsync them."""
        self.write_indexes(fsync=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pooled:
            ROLLED_SEGMENT_FILES.forget(self)
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def delete(self) -> None:
        self.close()
        txnindex = self.log_path[:-4] + ".txnindex"
        for path in (self.log_path, self.index_path, self.timeindex_path, txnindex):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, next={self.next_offset})"
