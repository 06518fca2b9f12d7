"""Files that must survive a power failure: written to a temporary file, fsynced,
renamed over the old one, and the directory fsynced, because a rename or a newly
created file is only durable once the directory entry is (ext4, XFS: fsync of the
directory; POSIX promises nothing less)."""

from __future__ import annotations

import os


def fsync_directory(path: str) -> None:
    """Make the directory's entries (files created, renamed, deleted) durable."""
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    if sync_directory:
        fsync_directory(os.path.dirname(path))
