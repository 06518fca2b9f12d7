"""The fuzzer's seed corpus: request frames (without the 4-byte size prefix) stored as
gzip'd ``[uint32 length][frame]`` records, one file per source."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
CLIENTS = CORPUS_DIR / "clients.bin.gz"      # captured from real clients
GENERATED = CORPUS_DIR / "generated.bin.gz"  # kio hypothesis strategies, every version
UPCOMING = CORPUS_DIR / "upcoming.bin.gz"    # the same, for APIs not served yet

# APIs the broker does not serve yet whose frames are in the corpus (UPCOMING): share
# groups (KIP-932: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge,
# Describe/Alter/DeleteShareGroupOffsets) and streams groups (KIP-1071). Until a handler
# serves one, the broker closes the connection on it (a WARNING, never an ERROR).
UPCOMING_APIS = (76, 77, 78, 79, 88, 89, 90, 91, 92)

_LEN = struct.Struct(">I")


def write_frames(path: Path, frames: list[bytes]) -> None:
    # mtime=0: the same frames give the same file bytes (no spurious git diffs).
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        for frame in frames:
            out.write(_LEN.pack(len(frame)) + frame)


def read_frames(path: Path) -> list[bytes]:
    data = gzip.decompress(path.read_bytes())
    frames, off = [], 0
    while off < len(data):
        (n,) = _LEN.unpack_from(data, off)
        frames.append(data[off + 4:off + 4 + n])
        off += 4 + n
    return frames


def load() -> list[bytes]:
    """Every seed frame, clients first. Client frames count four times: they are what
    real traffic looks like, and the generated ones outnumber them."""
    clients = read_frames(CLIENTS) if CLIENTS.exists() else []
    generated = read_frames(GENERATED) if GENERATED.exists() else []
    upcoming = read_frames(UPCOMING) if UPCOMING.exists() else []
    return clients * 4 + generated + upcoming


def api_of(frame: bytes) -> tuple[int, int]:
    """(api_key, version) of a frame (-1, -1 if it is too short)."""
    if len(frame) < 4:
        return -1, -1
    return struct.unpack_from(">hh", frame)  # type: ignore[return-value]


def coverage_gaps(corpus: list[bytes], advertised: list[tuple[int, int, int]]) -> list[
        tuple[int, int]]:
    """The (api key, version) pairs the broker advertises (``(key, min, max)`` as
    ApiVersions lists them) that no corpus frame is for: empty when every served API is
    seeded at every advertised version."""
    have = {api_of(f) for f in corpus}
    return [(key, v) for key, low, high in advertised for v in range(low, high + 1)
            if (key, v) not in have]
