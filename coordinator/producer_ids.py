"""Producer id allocation: blocks reserved durably before any id in them is handed out.

The file ``producer-id-block`` in the data directory holds the first id of the
next unreserved block. Reserving a block rewrites it (fsync + rename) before
ids from the block are used, so a crash can skip ids but never reuse one.
"""

from __future__ import annotations

import os

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdManager:
    def __init__(self, data_dir: str, block_size: int = BLOCK_SIZE) -> None:
        self.path = os.path.join(data_dir, FILE_NAME)
        self.block_size = block_size
        self._next = 0
        self._block_end = 0  # exclusive

    def _read_reserved(self) -> int:
        try:
            with open(self.path) as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return 0

    def _reserve(self) -> None:
        start = max(self._read_reserved(), self._block_end)
        end = start + self.block_size
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{end}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._next, self._block_end = start, end

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._reserve()
        pid = self._next
        self._next += 1
        return pid
