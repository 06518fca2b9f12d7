"""Files that must survive a power failure: written to a temporary file, fsynced,
renamed over the old one, and the directory fsynced, because a rename or a newly
created file is only durable once the directory entry is (ext4, XFS: fsync of the
directory; POSIX promises nothing less).

Fault injection needs to know which entries are not durable yet: files created or
renamed into a directory since its last fsync are noted here (process-wide, by
absolute directory path), and a simulated power loss removes them
(:func:`drop_unsynced_entries`), as a real one may.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib

_unsynced: dict[str, set[str]] = {}  # directory -> names created/renamed since its fsync
_lock = threading.Lock()


def note_new_entry(path: str) -> None:
    """``path`` was just created or renamed into place; its directory is not fsynced."""
    directory, name = os.path.split(os.path.abspath(path))
    with _lock:
        _unsynced.setdefault(directory, set()).add(name)


def unsynced_entries(directory: str) -> frozenset[str]:
    with _lock:
        return frozenset(_unsynced.get(os.path.abspath(directory), ()))


def entries_synced(directory: str, names: frozenset[str] | None = None) -> None:
    """The directory was fsynced after ``names`` (default: every noted entry) appeared."""
    directory = os.path.abspath(directory)
    with _lock:
        pending = _unsynced.get(directory)
        if pending is None:
            return
        if names is None:
            pending.clear()
        else:
            pending -= names
        if not pending:
            del _unsynced[directory]


def drop_unsynced_entries(directory: str) -> list[str]:
    """Fault injection (power loss): remove the files whose directory entries were never
    fsynced; returns their names. (A lost rename over an older file would bring the
    older file back; it is removed here, the harsher outcome for recovery.)"""
    directory = os.path.abspath(directory)
    with _lock:
        names = sorted(_unsynced.pop(directory, ()))
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    return names


def fsync_directory(path: str) -> None:
    """Make the directory's entries (files created, renamed, deleted) durable."""
    path = path or "."
    names = unsynced_entries(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    entries_synced(path, names)


def write_durably(path: str, data: bytes, *, sync_directory: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and durably (tmp, fsync, rename,
    directory fsync). ``sync_directory=False`` when the caller fsyncs the directory
    once for several files."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    note_new_entry(path)
    if sync_directory:
        fsync_directory(os.path.dirname(path))


# 0xC1 is never the first byte of a msgpack document: files that start with it carry a
# CRC32 of the rest; older files without it stay readable as they were.
CHECKED = b"\xc1"
_CRC = struct.Struct(">I")


def with_checksum(body: bytes) -> bytes:
    """``body`` framed so that a torn or garbled copy is detected (:func:`checked_body`):
    a msgpack document whose tail was cut or zero-filled may still decode."""
    return CHECKED + _CRC.pack(zlib.crc32(body)) + body


def checked_body(data: bytes) -> bytes:
    """The body of :func:`with_checksum`'s framing (ValueError if it does not check
    out); data without the framing (written before it) is returned as it is."""
    if data[:1] != CHECKED:
        return data
    head = 1 + _CRC.size
    if len(data) < head or _CRC.unpack_from(data, 1)[0] != zlib.crc32(data[head:]):
        raise ValueError(f"checksum mismatch: torn or corrupt ({len(data)} bytes)")
    return data[head:]
