"""The fsync helper process: fsyncs the files the broker passes it, off the broker's GIL.

Run by :class:`txbroker.storage.flusher.ProcessFsyncPool` as ``python fsync_helper.py FD
WORKERS`` (by path, so it imports nothing but the standard library). FD is one
end of an AF_UNIX SOCK_SEQPACKET socketpair.

Why a process: fsync threads inside the broker each need the GIL to wake up,
to return from fsync and to report, while the event loop holds it. Under load
those hand-offs, not the disk, set the length of a flush round (docs/internals/performance-history.md,
"fsync in a helper process"). Here only the helper's own threads share a GIL.

Protocol, one message per SOCK_SEQPACKET datagram:

* broker -> helper: ``<QI`` (round id, jobs in the round), then ``<II`` (job
  index, number of fds) for each job in this message, with the jobs' file
  descriptors attached in that order (SCM_RIGHTS). Usually one message per round;
  a round with more than MAX_FDS fds comes in several. The helper fsyncs each
  job's fds in order and closes its copies; the broker keeps its own until the
  answer.
* helper -> broker, once every job of a round is done: ``<QI`` (round id, jobs)
  followed by one ``<i`` errno per job (0: every fsync of that job succeeded).

The helper exits when the broker's end closes (the broker stopped or died), after
the fsyncs it has already started. It ignores SIGINT: a Ctrl-C in the broker's
terminal is the broker's to handle.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import struct
import sys
import threading

HEAD = struct.Struct("<QI")  # round id, jobs in the round (both directions)
JOB = struct.Struct("<II")  # job index, number of its fds
ERRNO = struct.Struct("<i")
MAX_FDS = 250  # per message, below SCM_MAX_FD (253)
MAX_MESSAGE = HEAD.size + JOB.size * MAX_FDS * 2


def requests(round_id: int, jobs: list[list[int]]) -> list[tuple[bytes, list[int]]]:
    """The messages (bytes, fds) that send a round's jobs to the helper."""
    out: list[tuple[bytes, list[int]]] = []
    head = HEAD.pack(round_id, len(jobs))
    parts: list[bytes] = []
    fds: list[int] = []
    for index, job in enumerate(jobs):
        if len(job) > MAX_FDS:
            raise ValueError(f"a job of {len(job)} files")
        if len(fds) + len(job) > MAX_FDS:
            out.append((head + b"".join(parts), fds))
            parts, fds = [], []
        parts.append(JOB.pack(index, len(job)))
        fds = fds + job
    out.append((head + b"".join(parts), fds))
    return out


def _fsync_all(fds: list[int]) -> int:
    error = 0
    for fd in fds:
        try:
            if not error:
                os.fsync(fd)
        except OSError as e:
            error = e.errno or 5  # EIO when the kernel gave no number
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
    return error


def serve(sock: socket.socket, workers: int) -> None:
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    rounds: dict[int, list] = {}  # round id -> [jobs left, errnos]
    lock = threading.Lock()

    def work() -> None:
        while True:
            item = jobs.get()
            if item is None:
                return
            round_id, index, size, fds = item
            error = _fsync_all(fds)
            with lock:
                entry = rounds.setdefault(round_id, [size, [0] * size])
                entry[1][index] = error
                entry[0] -= 1
                if entry[0]:
                    continue
                del rounds[round_id]
                reply = HEAD.pack(round_id, size) + b"".join(ERRNO.pack(e) for e in entry[1])
                try:
                    sock.send(reply)
                except OSError:
                    pass  # the broker is gone; nothing left to tell

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
        except OSError:
            break
        if not data:
            for fd in fds:
                os.close(fd)
            break  # the broker closed its end
        round_id, size = HEAD.unpack_from(data)
        at = 0
        for pos in range(HEAD.size, len(data), JOB.size):
            index, count = JOB.unpack_from(data, pos)
            jobs.put((round_id, index, size, list(fds[at:at + count])))
            at += count
    for _ in threads:
        jobs.put(None)
    for t in threads:
        t.join()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    serve(sock, int(argv[1]) if len(argv) > 1 else 4)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
