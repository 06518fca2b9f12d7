"""Mutations of request frames: what a hostile or broken client could send.

Every mutated frame is a pure function of (seed, index): ``mutated(corpus, seed, i)``
builds the same bytes whatever order the frames are sent in, so a failure found at
frame i of seed S can be rebuilt from those two numbers alone.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence

from txbroker.broker.handlers import supported_versions
from txbroker.protocol.messages import is_flexible_request

from .corpus import api_of

# Values that break length/count arithmetic: null, "one past", sign bits, maxima.
INT16 = (0, -1, -2, 1, 0x7FFF, -0x8000, 0x7FFE)
INT32 = (0, -1, -2, 1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0x10000, 0xC000000, 0x40000000)
VARINTS = (
    b"\x00",                        # compact null / zero
    b"\x01",                        # compact empty
    b"\xff\xff\xff\xff\x0f",        # 0xffffffff: the count that aborted kio 0.6.5
    b"\xff\xff\xff\xff\x07",        # 0x7fffffff
    b"\x80\x80\x80\x80\x0c",        # 0xc0000000
    b"\xff\xff\xff\xff\x1f",        # 33 bits
    b"\xff\xff\xff\xff\xff\x01",    # six bytes
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # varint overflow: ten bytes
    b"\x80",                        # a continuation bit and nothing after
    b"\xfe\xff\x03",                # 65534
)

ADVERTISED = [(k, v) for k, low, high in supported_versions() for v in range(low, high + 1)]

Mutation = Callable[[random.Random, bytearray, Sequence[bytes]], bytearray]


def _body_start(frame: bytes | bytearray) -> int:
    """Offset just after the request header (client id and, if flexible, its tagged
    fields); the header length itself if the frame lies about it."""
    if len(frame) < 10:
        return min(len(frame), 8)
    key, version, _cid, n = struct.unpack_from(">hhih", frame)
    off = 10 + max(n, 0)
    try:
        if is_flexible_request(key, version) and off < len(frame):
            off += 1  # the header's tagged fields, almost always 0
    except Exception:  # noqa: BLE001 - an unknown key: no header rule
        pass
    return min(off, len(frame))


def _pos(rng: random.Random, frame: bytearray, width: int = 1, body: bool = True) -> int:
    low = _body_start(frame) if body and rng.random() < 0.85 else 0
    high = max(low, len(frame) - width)
    return rng.randint(low, high) if high > low else low


def bit_flips(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        if f:
            i = _pos(rng, f)
            if i < len(f):
                f[i] ^= 1 << rng.randrange(8)
    return f


def byte_subs(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    for _ in range(rng.choice((1, 2, 4))):
        if f:
            i = _pos(rng, f)
            if i < len(f):
                f[i] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, rng.randrange(256)))
    return f


def truncate(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    return f[:rng.randint(0, max(len(f) - 1, 0))]


def extend(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    tail = rng.choice((b"\x00", b"\xff" * 4, rng.randbytes(rng.randint(1, 64)),
                       rng.randbytes(rng.randint(1, 4096))))
    return f + tail


def int_lie(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    """A length or count (int16 / int32, also where none is) set to a hostile value."""
    if rng.random() < 0.5:
        i = _pos(rng, f, 2)
        if i + 2 <= len(f):
            struct.pack_into(">h", f, i, rng.choice(INT16))
    else:
        i = _pos(rng, f, 4)
        if i + 4 <= len(f):
            struct.pack_into(">i", f, i, rng.choice(INT32))
    return f


def varint_lie(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    """A compact length/count replaced by a hostile varint (overwriting or inserted)."""
    i = _pos(rng, f)
    v = rng.choice(VARINTS)
    if rng.random() < 0.5:
        return f[:i] + v + f[i + 1:]
    return f[:i] + v + f[i:]


def tagged_garbage(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    """Tagged fields that lie: counts, tags and sizes past the end, duplicated tags, at
    the end of the body (the top-level tagged fields) or in the header's slot."""
    count = rng.choice((b"\x01", b"\x02", b"\x7f", b"\xff\xff\xff\xff\x0f"))
    fields = b""
    for _ in range(rng.randint(1, 3)):
        tag = rng.choice((b"\x00", b"\x01", b"\x05", b"\xff\xff\xff\xff\x0f", b"\x80\x80"))
        size = rng.choice((b"\x00", b"\x01", b"\x64", b"\xff\xff\xff\xff\x0f", b"\xff\xff\x03"))
        fields += tag + size + rng.randbytes(rng.randint(0, 8))
    garbage = count + fields
    if rng.random() < 0.6 and f:
        return f[:-1] + garbage  # the body's own tagged fields (usually a final 0 byte)
    i = _body_start(f) - 1  # the header's tagged-fields byte in flexible versions
    return f[:max(i, 0)] + garbage + f[max(i, 0) + 1:]


def swap_api(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    """One API's body under another API key / version (flexible under non-flexible and
    the reverse), now and then a version nobody advertises."""
    if len(f) < 4:
        return f
    if rng.random() < 0.9:
        key, version = rng.choice(ADVERTISED)
    else:
        key, version = rng.choice(((0, 99), (1, -1), (76, 1), (78, 2), (-1, 0), (1000, 1),
                                   (18, 99)))
    struct.pack_into(">hh", f, 0, key, version)
    return f


def header_garbage(rng: random.Random, f: bytearray, _c: Sequence[bytes]) -> bytearray:
    """Client id length lies (-2, past the end, maximum), a random correlation id."""
    if len(f) < 10:
        return f
    if rng.random() < 0.3:
        struct.pack_into(">i", f, 4, rng.choice((0, -1, 0x7FFFFFFF, rng.getrandbits(31))))
        return f
    n = struct.unpack_from(">h", f, 8)[0]
    lie = rng.choice((-2, -1, 0x7FFF, n + 1, n + 100, -0x8000))
    struct.pack_into(">h", f, 8, max(-0x8000, min(0x7FFF, lie)))  # an int16 whatever n was
    return f


def splice(rng: random.Random, f: bytearray, corpus: Sequence[bytes]) -> bytearray:
    other = rng.choice(corpus)
    return f[:rng.randint(0, len(f))] + other[rng.randint(0, len(other)):]


MUTATIONS: dict[str, tuple[Mutation, int]] = {  # name -> (mutation, weight)
    "bit_flips": (bit_flips, 5),
    "byte_subs": (byte_subs, 3),
    "truncate": (truncate, 2),
    "extend": (extend, 1),
    "int_lie": (int_lie, 5),
    "varint_lie": (varint_lie, 4),
    "tagged_garbage": (tagged_garbage, 2),
    "swap_api": (swap_api, 2),
    "header_garbage": (header_garbage, 1),
    "splice": (splice, 1),
}
_NAMES = list(MUTATIONS)
_WEIGHTS = [MUTATIONS[n][1] for n in _NAMES]


def _rng(seed: int, index: int) -> random.Random:
    return random.Random(seed * 0x9E3779B1 + index)


def source_index(corpus_size: int, seed: int, index: int) -> int:
    """Which corpus frame frame ``index`` of run ``seed`` is a mutation of."""
    return _rng(seed, index).randrange(corpus_size)


def mutated(corpus: Sequence[bytes], seed: int, index: int) -> tuple[bytes, str]:
    """Frame ``index`` of run ``seed`` with its size prefix, and what was done to it.

    Now and then the size prefix lies too (shorter than the body: the rest reads as
    the next frame; longer: the broker waits for bytes that never come)."""
    rng = _rng(seed, index)
    source = rng.randrange(len(corpus))  # source_index's draw: the first
    frame = bytearray(corpus[source])
    names = rng.choices(_NAMES, _WEIGHTS, k=rng.choice((1, 1, 1, 2, 3)))
    for name in names:
        frame = MUTATIONS[name][0](rng, frame, corpus)
    size = len(frame)
    what = f"seed {source} {api_of(corpus[source])}: " + "+".join(names)
    if rng.random() < 0.01:
        size = rng.choice((max(size - rng.randint(1, 8), 0), size + rng.randint(1, 16)))
        what += f"+size_lie({size} for {len(frame)})"
    return struct.pack(">i", size) + bytes(frame), what
