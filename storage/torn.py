"""Fault injection: torn writes, as a power failure can leave them.

A disk persists unsynced data a page at a time and in any order: after the power goes,
a file holds its durable part plus any subset of the pages written after it; a page
that did not persist reads back as zeros when a later one did (the file was extended),
and the file ends at its last persisted page. A small file rewritten in place (no
rename atomicity, or a disk that reorders the rename before the data) may be left
half-written: a prefix of its new content, maybe zero-filled to the new length.

Only the files named here are touched; whoever calls decides what was unsynced.
"""

from __future__ import annotations

import os
import random

PAGE = 4096


def tear_file(path: str, durable: int, rng: random.Random) -> int:
    """Keep the first ``durable`` bytes of ``path`` and a random subset of the 4 KiB
    pages (aligned on file offsets) after it; returns the bytes not persisted."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return 0
    durable = max(0, min(durable, size))
    if size == durable:
        return 0
    with open(path, "r+b") as f:
        f.seek(durable)
        tail = bytearray(f.read())
        keep = bytearray(len(tail))  # zeros where a page did not persist
        end = kept = 0  # end: the tail's length up to its last persisted page
        start = 0
        while start < len(tail):
            stop = min(len(tail), (durable + start) // PAGE * PAGE + PAGE - durable)
            if rng.random() < 0.5:
                keep[start:stop] = tail[start:stop]
                end = stop
                kept += stop - start
            start = stop
        f.seek(durable)
        f.write(keep[:end])
        f.truncate(durable + end)
    return len(tail) - kept


def tear_small_file(path: str, rng: random.Random) -> bool:
    """Leave ``path`` half-written: a random prefix of it, then either nothing or zeros
    to its length. Returns whether it changed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    if not data:
        return False
    cut = rng.randrange(len(data))
    torn = data[:cut] + (bytes(len(data) - cut) if rng.random() < 0.5 else b"")
    with open(path, "wb") as f:
        f.write(torn)
    return torn != data
