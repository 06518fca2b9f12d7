"""One client connection: framing, per-connection ordering and backpressure.

Each connection reads 4-byte size-prefixed frames. Requests are handled
concurrently but answered strictly in the order they arrived (a per-connection
queue of handler tasks, answered from the head as they finish), so pipelining clients see
Kafka's ordering. A frame larger than ``socket.request.max.bytes`` closes that
connection only, with a log line, as Kafka does. Every cost a connection can cause
is bounded: queued requests (``queued.max.requests``), unsent response bytes
(MAX_UNSENT_BYTES), request bytes across all connections (``queued.max.request.bytes``,
RequestMemory), one Fetch at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
import time
from collections import deque
from typing import Any, Protocol

from txbroker.protocol.messages import ResponseParts

from .context import CLOSE, CloseAfter, CloseConnection, Session

log = logging.getLogger("txbroker")

_SIZE = struct.Struct(">i")
# A connection whose computed responses are not yet taken by its socket holds this many
# bytes at most before the broker stops reading its requests (Kafka mutes a channel
# until its response is sent: one request at a time; we pipeline, within this bound).
MAX_UNSENT_BYTES = 4 << 20
# Frames above this are read in chunks into one buffer (Connection._read_large).
LARGE_FRAME = 1 << 20
# Frames one connection may read in a row from its buffer before letting others run.
FRAMES_PER_TURN = 8
_DRAIN = object()  # Connection._send_ready: the writer must wait for the socket
_FETCH_KEY = struct.Struct(">h")
FETCH = 1


class ConnectionOwner(Protocol):
    """What a connection uses of the broker (server.Broker)."""

    config: Any
    request_memory: RequestMemory
    shutdown_timeout: float

    def dispatch(self, frame: bytes, session: Session) -> asyncio.Task: ...


def return_large_buffers_to_the_os() -> None:
    """glibc's malloc raises its mmap threshold after a large buffer is freed, so the
    next large request frames and responses come from the heap and stay in the RSS
    after they are gone (246 MB after eight 100 MB frames). A fixed threshold of 32 MiB
    keeps every larger buffer in its own mapping, unmapped when freed. Not lower: at
    256 KiB every produce frame and its copies were fresh mappings, page-faulted in
    each time (produce at 0.48x). Smaller buffers come from the heap, whose free top is
    given back past 64 MiB (the trim threshold)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return  # not glibc: nothing to tune
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 << 20)
    libc.mallopt(m_trim_threshold, 64 << 20)
    global _malloc_trim
    _malloc_trim = libc.malloc_trim


_malloc_trim: Any = None  # glibc's malloc_trim, once the tuning above found glibc

# How often the free heap is given back (trim_free_heap): a minute's growth is small.
HEAP_TRIM_INTERVAL_S = 60.0


def trim_free_heap() -> None:
    """Give the free pages inside the heap back to the OS (glibc's malloc_trim; run it
    off the event loop: ctypes releases the GIL). The buffers of requests and fetches
    under 32 MiB come from the heap; freed in varying sizes, they leave free chunks
    between live ones that the trim threshold never returns: a 30-minute soak grew
    the RSS by 9 MB while the bytes in use stayed flat (malloc's own count)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


class RequestMemory:
    """``queued.max.request.bytes``: request bytes held across all connections. A
    connection whose next frame does not fit waits before its body is read, so many
    clients declaring large frames cannot add up to more than the bound."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: list[asyncio.Future] = []

    async def acquire(self, size: int) -> None:
        if self.limit < 0:
            return
        while self.used and self.used + size > self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        self.used += size

    def try_acquire(self, size: int) -> bool:
        """acquire without waiting: False (nothing taken) if ``size`` does not fit now."""
        if self.limit < 0:
            return True
        if self.used and self.used + size > self.limit:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        if self.limit < 0:
            return
        self.used -= size
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class Connection:
    def __init__(self, broker: ConnectionOwner, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, session: Session) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.peer = session.peer
        self.session = session
        self.last_active = time.monotonic()
        self.in_flight = 0
        self._max_queued = max(1, broker.config.get("queued.max.requests"))
        # Handler tasks in arrival order; the writer answers them in this order.
        self._responses: deque[asyncio.Task] = deque()
        self._queued = asyncio.Event()  # the writer has something to do (or must stop)
        self._progress = asyncio.Event()  # the writer answered one (the reader may go on)
        self._unsent = 0  # bytes of computed responses not yet given to the socket
        self._draining = False  # the writer waits for the socket: nothing more is written
        self._last_fetch: asyncio.Task | None = None
        self._read_task: asyncio.Task | None = None
        self.closing = False

    @property
    def busy(self) -> bool:
        """A request of this connection is still being handled."""
        return any(not task.done() for task in self._responses)

    async def run(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer_task = asyncio.create_task(self._write_loop())
        self._read_task = asyncio.create_task(self._read_loop())
        try:
            await self._read_task
        except asyncio.CancelledError:
            pass  # shutdown or idle reaping: stop reading, answer what is in flight
        except asyncio.IncompleteReadError as e:
            if e.partial:  # the client went away in the middle of a frame
                log.info("connection %s closed by the client mid-request (%d of %d bytes "
                         "received)", self.peer, len(e.partial), e.expected)
        except ConnectionError:
            pass  # the client went away
        except CloseConnection:
            pass
        except Exception:
            log.exception("connection %s failed", self.peer)
        finally:
            self.closing = True
            self._queued.set()
            held = self.session.held
            if held is not None and not held.done():
                # A dropped answer (fault): nothing to wait for. Set, not cancelled: a
                # cancelled request would not wake the writer, and the teardown (and a
                # share session's release of its records) would wait shutdown.timeout.ms.
                held.set_result(None)
            try:
                await asyncio.wait_for(writer_task, self.broker.shutdown_timeout)
            except (TimeoutError, asyncio.CancelledError):
                writer_task.cancel()
            except Exception:
                pass
            self._cancel_pending()
            # The ended read task's exception holds _read_loop's frame, and so the last
            # request frame and this connection: a cycle that would keep up to
            # socket.request.max.bytes alive until the next garbage collection.
            self._read_task = self._last_fetch = None
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _read_loop(self) -> None:
        max_bytes = self.broker.config.get("socket.request.max.bytes")
        sasl_max = self.broker.config.for_listener(self.session.listener_name,
                                                   "sasl.server.max.receive.size")
        memory = self.broker.request_memory
        read = self.reader.readexactly
        session = self.session
        transport = self.writer.transport
        unyielded = 0  # frames read in a row without suspending
        while True:
            size = _SIZE.unpack(await read(4))[0]
            self.last_active = time.monotonic()
            if not session.authenticated and not 0 <= size <= sasl_max:
                # Before authentication, Kafka's sasl.server.max.receive.size bounds a frame.
                log.warning("closing %s: request size %d before SASL authentication is outside "
                            "[0, sasl.server.max.receive.size=%d]", self.peer, size, sasl_max)
                raise CloseConnection
            if size < 0 or size > max_bytes:
                log.warning("closing %s: request size %d is outside [0, socket.request.max.bytes=%d]",
                            self.peer, size, max_bytes)
                raise CloseConnection
            if not memory.try_acquire(size):  # (no coroutine per frame when it fits)
                await memory.acquire(size)
            try:
                frame = await read(size) if size <= LARGE_FRAME else await self._read_large(size)
            except BaseException:
                memory.release(size)
                raise
            self.last_active = time.monotonic()
            is_fetch = size >= 2 and _FETCH_KEY.unpack_from(frame)[0] == FETCH
            if is_fetch and self._last_fetch is not None and not self._last_fetch.done():
                # One Fetch at a time per connection: each may build up to fetch.max.bytes.
                await asyncio.wait([self._last_fetch])
            if len(self._responses) >= self._max_queued or self._unsent > MAX_UNSENT_BYTES \
                    or transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
                await self._wait_for_room()
            task = self.broker.dispatch(frame, self.session)
            task.add_done_callback(functools.partial(self._on_done, size))
            if is_fetch:
                self._last_fetch = task
            self.in_flight += 1
            self._responses.append(task)
            if self.closing:
                return
            if not session.authenticated:
                # During SASL authentication one request at a time, as Kafka: the next
                # frame is judged by the state this one leaves.
                await asyncio.wait([task])
            # Frames already buffered are read without suspending: after a few in a row,
            # yield, so a client pipelining thousands cannot hold the loop from others.
            # A yield per frame cost a loop turn per request (a librdkafka client's
            # buffer is rarely empty); a read that suspends is a turn anyway.
            if len(self.reader._buffer) < 4:
                unyielded = 0
            else:
                unyielded += 1
                if unyielded >= FRAMES_PER_TURN:
                    unyielded = 0
                    await asyncio.sleep(0)

    async def _read_large(self, size: int) -> memoryview:
        """A large frame read in chunks into one buffer: StreamReader.readexactly would
        hold it twice (its buffer and the copy it returns), 200 MB for a 100 MB frame.
        Read-only, as kio's reader requires."""
        buf = bytearray(size)
        view = memoryview(buf)
        pos = 0
        try:
            while pos < size:
                chunk = await self.reader.read(min(size - pos, 1 << 20))
                if not chunk:
                    log.info("connection %s closed by the client mid-request (%d of %d bytes "
                             "received)", self.peer, pos, size)
                    raise ConnectionResetError
                view[pos:pos + len(chunk)] = chunk
                pos += len(chunk)
        except BaseException:
            # Free it now: the traceback would keep it until the connection is gone,
            # while queued.max.request.bytes already lets the next frame in.
            view.release()
            buf.clear()
            raise
        return view.toreadonly()

    async def _wait_for_room(self) -> None:
        """Backpressure: do not start another request while this connection has too
        many requests queued or too many response bytes its client has not taken."""
        while not self.closing:
            if len(self._responses) >= self._max_queued or self._unsent > MAX_UNSENT_BYTES:
                self._progress.clear()
                await self._progress.wait()
            elif self.writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
                await self.writer.drain()
            else:
                return

    def _on_done(self, size: int, task: asyncio.Task) -> None:
        self.broker.request_memory.release(size)
        if task.cancelled():
            return
        if task.exception() is None:  # (retrieved: no "exception was never retrieved")
            response = task.result()
            if type(response) is bytes or type(response) is ResponseParts:
                self._unsent += len(response)
        if self._responses and self._responses[0] is task:
            # The oldest request is answered here, and those finished behind it: waking
            # the writer task for each cost two task steps per request.
            try:
                if self._send_ready() is not None or (self.closing and not self._responses):
                    self._queued.set()  # what only the writer does: a drain, a close
            except Exception:  # (in the writer it would end the connection: so here)
                log.exception("answering %s failed; closing the connection", self.peer)
                self._abort_reading()
                self._cancel_pending()

    def _send_ready(self) -> object | None:
        """Write the answers of the finished requests at the head of the queue, in
        arrival order. None: nothing finished is left unanswered. _DRAIN: the socket
        has more than a MiB it has not taken (the writer waits for it). Else the
        finished head task this does not answer: an error or a close.

        Answers found finished together go to the socket in one write, up to a MiB at
        a time: a flush round finishes a client's produce requests of all its
        partitions at once, and a send each cost a system call each."""
        if self._draining:
            return _DRAIN
        responses = self._responses
        transport = self.writer.transport
        while True:
            out: list = []
            pending = answered = 0
            head = None
            while responses and pending <= 1 << 20:
                task = responses[0]
                if not task.done():
                    break
                if task.cancelled():
                    responses.popleft()
                    continue
                if task.exception() is not None:
                    head = task
                    break
                response = task.result()
                if response is CLOSE or type(response) is CloseAfter or (
                        response is not None and transport.is_closing()):
                    head = task
                    break
                responses.popleft()
                self.in_flight -= 1
                answered += 1
                if response is not None:
                    if type(response) is ResponseParts:
                        out += response.parts
                    else:
                        out.append(response)
                    pending += len(response)
            if answered:
                self._unsent = self._unsent - pending if responses else 0
                self._progress.set()
                self.last_active = time.monotonic()
                if len(out) == 1:
                    self.writer.write(out[0])
                elif out:
                    self.writer.writelines(out)
                if transport.get_write_buffer_size() > 1 << 20:
                    return _DRAIN
            if head is not None or pending <= 1 << 20 or not responses:
                return head

    async def _write_loop(self) -> None:
        """Answers what the requests' done callbacks cannot: waits for the socket to
        take a large backlog, closes the connection on a close or a failure, and ends
        once a closing connection has answered everything in flight."""
        while True:
            head = self._send_ready()
            if head is None:
                if self.closing and not self._responses:
                    return
                self._queued.clear()
                await self._queued.wait()
            elif head is _DRAIN:
                self._draining = True
                try:
                    await self.writer.drain()
                finally:
                    self._draining = False
            else:
                self._close_after(head)
                return

    def _close_after(self, task: asyncio.Task) -> None:
        """The connection ends at this finished request: CLOSE, a CloseAfter (its
        answer written first), a failure, or a socket already closing."""
        error = task.exception()
        if error is not None:
            if not isinstance(error, CloseConnection):
                log.error("request from %s failed; closing the connection", self.peer,
                          exc_info=error)
            self._abort_reading()
            self._cancel_pending()
            return
        response = task.result()
        self._responses.popleft()
        self.in_flight -= 1
        if type(response) is CloseAfter:
            if not self.writer.transport.is_closing():
                self.writer.write(bytes(response.data))
        elif response is not CLOSE:  # an answer for a socket already closing
            self._cancel_pending()
            return
        self._abort_reading()
        self._cancel_pending()

    def _cancel_pending(self) -> None:
        while self._responses:
            self._responses.popleft().cancel()
        self._progress.set()

    def _abort_reading(self) -> None:
        self.closing = True
        self._queued.set()
        self._progress.set()
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()

    def stop_reading(self) -> None:
        self._abort_reading()

    def abort(self) -> None:
        """Drop the connection now, answered or not (a client that does not read)."""
        self._abort_reading()
        self.writer.transport.abort()
