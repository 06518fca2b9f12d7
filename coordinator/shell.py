"""The one async shell of the coordinators: it drives a sans-IO state machine.

A coordinator (transaction, group, and a share coordinator next) is a state machine
over plain data (no I/O, no clock) that returns *effects*, plus a small adapter that
tells this shell what its effects mean. The shell does the I/O:

* **Requests.** :meth:`CoordinatorShell.call` gives a request a token, applies the
  machine's effects for it and awaits the answer the machine gives that token, now or
  in the effects of a later call (None if the shell stopped first).
* **Effects, in a loop.** :meth:`CoordinatorShell.apply` reports the events, resolves
  the answered tokens' futures, appends the records to persist in the order asked,
  lets the adapter act on the rest (the transaction coordinator's markers) and re-arms
  the wake timer. A write the machine may act on at once is reported back
  (``persisted``) from the same loop, depth first, as a recursion would, without one.
* **Persisting** through the internal topic (:mod:`.internal_topic`): each record is
  appended now, in order, and reported once acknowledged by the log's flush policy
  (a callback on the flusher's future, not a task per record), or at once when the
  adapter says so. A failed append or fsync is reported with the client's error from
  :func:`coordinator_append_error` (Kafka's mapping: a storage error is NOT_COORDINATOR),
  never as a success.
* **Fault points.** A record the adapter names a fault point for is reported only
  after it is fsynced and the armed point has fired (``faults.hit``).
* **The wake timer** (:class:`~.wake_timer.WakeTimer`) fires ``adapter.tick``.
* **Loading**: the load task (:meth:`CoordinatorShell.start`) and
  :func:`read_batches`, which reads a partition of the internal topic while the
  event loop keeps serving.

Who may touch what: the shell owns its tokens, futures, tasks and timer; only its
methods change them. The state machine is the adapter's; the shell calls it only
through the adapter (:class:`Adapter`), from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from txbroker.protocol.errors import KafkaError
from txbroker.protocol.records import BatchHeader, Record
from txbroker.storage.log import PartitionLog, now_ms
from txbroker.storage.manager import LogManager

from .internal_topic import (
    append_error_code,
    append_records,
    coordinator_append_error,
    ensure_internal_topic,
    iter_partition_batches,
    partition_log_for,
)
from .wake_timer import TaskSet, WakeTimer

__all__ = ["Adapter", "CoordinatorShell", "Faults", "coordinator_append_error",
           "now_ms", "read_batches"]

log = logging.getLogger(__name__)

_E = ErrorCode
# Batches of the internal topic read between two turns of the event loop while loading.
BATCHES_PER_TURN = 100
# First pause before a write refused by a full or failing disk is reported (and so
# retried); it doubles while the condition lasts (storage/disk_conditions.py).
PERSIST_RETRY_BACKOFF_S = 0.1


async def read_batches(plog: PartitionLog, start: int
                       ) -> AsyncIterator[tuple[BatchHeader, list[Record]]]:
    """The decoded batches of a partition of an internal topic from ``start`` on, with a
    turn of the event loop every BATCHES_PER_TURN batches: a load keeps serving."""
    for n, batch in enumerate(iter_partition_batches(plog, start)):
        if n % BATCHES_PER_TURN == BATCHES_PER_TURN - 1:
            await asyncio.sleep(0)
        yield batch


class Faults(Protocol):
    """The fault injector's part the shell uses (:class:`.transaction.faults.FaultInjector`)."""

    armed: dict[str, str]

    async def hit(self, point: str, **kwargs: Any) -> bool: ...


class Adapter(Protocol):
    """What a coordinator tells the shell about its state machine and records.

    ``Effects`` are the machine's: they have ``events``, ``responses`` (token ->
    answer) and ``persist`` (write requests with ``write_id``, ``key``, ``value``)."""

    def report(self, event: Any) -> None:
        """Log (and count) one event of the machine."""

    def persisted(self, now: int, write_id: int, error: int) -> Any:
        """The machine's effects of write ``write_id`` being durable (or failed)."""

    def placement(self, request: Any) -> str:
        """The key whose internal-topic partition the record goes to."""

    def on_effects(self, effects: Any) -> None:
        """Act on the effects the shell does not know (after the records are appended)."""

    def next_wake(self, effects: Any | None) -> int | None:
        """When the timer must fire next (epoch ms; None: never)."""

    def tick(self, now: int) -> Any:
        """The timer fired: the machine's effects."""


class CoordinatorShell:
    """Drives one state machine through its adapter (see the module docstring).

    ``keep_earlier_wake``: the timer keeps a wake earlier than the one asked (a machine
    whose tick does nothing before a deadline, and whose next wake moves later with
    nearly every call: the transaction coordinator's timeouts)."""

    def __init__(self, logs: LogManager, topic: str, adapter: Adapter, *,
                 partitions: int, segment_bytes: int, faults: Faults | None = None,
                 keep_earlier_wake: bool = False) -> None:
        self.logs = logs
        self.topic = topic
        self.adapter = adapter
        self.faults = faults
        self._partitions = partitions
        self._segment_bytes = segment_bytes
        self._keep_earlier = keep_earlier_wake
        # Optional hooks of the adapter: how a record is persisted (act on it once
        # appended; its fault point) and what it does once a record is appended.
        self._persist_options: Callable[[Any], tuple[bool, str | None]] | None = \
            getattr(adapter, "persist_options", None)
        self._appended: Callable[[PartitionLog, Any], None] | None = \
            getattr(adapter, "appended", None)
        self._tokens = itertools.count(1)
        self.futures: dict[int, asyncio.Future] = {}
        self.tasks = TaskSet()
        self.timer = WakeTimer(self._tick)
        self.load_task: asyncio.Task | None = None
        self.stopped = False
        # apply()'s work not yet done: effects, and write ids to report as persisted
        # (a stack: depth first, in the order a recursion would take them).
        self._pending: list[tuple[Any, int | None]] = []
        self._applying = False

    # --- lifecycle ----------------------------------------------------------------

    def start(self, load: Coroutine[Any, Any, None] | None = None, name: str = "") -> None:
        """Serve again after a stop; run ``load`` (of the internal topic) in the
        background."""
        self.stopped = False
        if load is not None:
            self.load_task = asyncio.create_task(load, name=name)

    async def stop(self, *tasks: asyncio.Task | None) -> None:
        """Cancel the load and background tasks (and ``tasks``), the timer; the requests
        still waiting are answered None."""
        self.stopped = True
        await self.tasks.cancel_all(self.load_task, *tasks)
        self.timer.cancel()
        for fut in self.futures.values():
            if not fut.done():
                fut.set_result(None)
        self.futures.clear()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.tasks.spawn(coro)

    def ensure_topic(self) -> None:
        ensure_internal_topic(self.logs, self.topic, self._partitions, self._segment_bytes)

    def partition_log(self, key: str) -> PartitionLog:
        """The internal topic's partition log of ``key`` (the topic created if needed)."""
        self.ensure_topic()
        return partition_log_for(self.logs, self.topic, key)

    # --- requests and effects -----------------------------------------------------

    async def call(self, start: Callable[[int], Any]) -> Any:
        """Apply ``start(token)`` (the machine's effects for a new request) and await the
        answer to the token; None if the shell stopped first."""
        token = next(self._tokens)
        fut = asyncio.get_running_loop().create_future()
        self.futures[token] = fut
        self.apply(start(token))
        try:
            return await fut
        finally:
            self.futures.pop(token, None)

    def apply(self, effects: Any) -> None:
        """Carry out the machine's effects, and those of the writes acted on at once."""
        self._pending.append((effects, None))
        if self._applying:  # called from a hook of the loop below: it takes them
            return
        self._applying = True
        try:
            pending = self._pending
            while pending:
                effects, write_id = pending.pop()
                if effects is None:
                    effects = self.adapter.persisted(now_ms(), write_id, _E.none.value)
                settled = self._apply_one(effects)
                # Reversed onto the stack: the first settled write is reported first.
                pending.extend((None, w) for w in reversed(settled))
        finally:
            self._applying = False

    def _apply_one(self, effects: Any) -> list[int]:
        adapter = self.adapter
        for event in effects.events:
            adapter.report(event)
        futures = self.futures
        for token, result in effects.responses.items():
            fut = futures.pop(token, None)
            if fut is not None and not fut.done():
                fut.set_result(result)
        settled = [write_id for request in effects.persist
                   if (write_id := self.persist(request)) is not None]
        adapter.on_effects(effects)
        self.reschedule(adapter.next_wake(effects))
        return settled

    def reschedule(self, wake_ms: int | None) -> None:
        if self._keep_earlier:
            self.timer.set_no_later(wake_ms)
        else:
            self.timer.set(wake_ms)

    def _tick(self) -> None:
        self.apply(self.adapter.tick(now_ms()))

    # --- persisting ----------------------------------------------------------------

    def persist(self, request: Any, *, act_on_append: bool = False,
                fault_point: str | None = None) -> int | None:
        """Append ``request``'s record now (in the order asked) and report it to the
        machine once acknowledged. Returns its write id if it is to be reported at once
        (``act_on_append``, or the log acknowledges without an fsync): :meth:`apply`
        does. The adapter's ``persist_options(request)``, if it has one, gives
        ``act_on_append`` and ``fault_point``."""
        if self._persist_options is not None:
            act_on_append, fault_point = self._persist_options(request)
        try:
            plog = self.partition_log(self.adapter.placement(request))
            # A record acted on at once asks for no fsync of its own (see the adapter).
            last = append_records(plog, [(request.key, request.value)],
                                  flush=not (act_on_append and plog.config.fsync_every_append)
                                  ).last_offset
        except (KafkaError, OSError) as e:
            code = append_error_code(e)
            # An expected errno (ENOSPC, EROFS, EIO) is the data directory's condition
            # (storage/disk_conditions.py): a few lines while it lasts, not one per request.
            delay = 0.0
            if not isinstance(e, OSError) or not self.logs.disk.refused(
                    e, f"{self.topic} record", self.logs.data_dir):
                log.error("cannot persist %s to %s: %s: %r", self.adapter.placement(request),
                          self.topic, code.name.upper(), e)
            else:
                # The machine asks again at once for some writes (a Complete* record, as
                # Kafka retries it): without a pause a full disk spins the loop (13,700
                # refused writes a second measured).
                delay = self.logs.disk.retry_delay("coordinator write", PERSIST_RETRY_BACKOFF_S)
            self.spawn(self._report(None, -1, request.write_id,
                                    coordinator_append_error(code), None, delay))
            return None
        if self._appended is not None:
            self._appended(plog, request)
        if act_on_append:
            return request.write_id
        if fault_point is not None and self.faults is not None \
                and fault_point in self.faults.armed:
            self.spawn(self._report(plog, last, request.write_id, _E.none.value, fault_point))
            return None
        fut = self.logs.flusher.acked(plog, last + 1)
        if fut is None:
            return request.write_id
        # A callback, not a Task per record: this is on every transaction's path.
        fut.add_done_callback(lambda f: self._acked(f, request.write_id))
        return None

    def _acked(self, fut: asyncio.Future, write_id: int) -> None:
        if fut.cancelled() or self.stopped:
            return  # stopped, or the flusher was abandoned (crash teardown)
        error = _E.none.value
        if fut.exception() is not None:
            # Its fsync failed (LogOfflineError): never durable, so never acted on.
            error = coordinator_append_error(_E.kafka_storage_error)
        self.apply(self.adapter.persisted(now_ms(), write_id, error))

    async def _report(self, plog: PartitionLog | None, last: int, write_id: int, error: int,
                      fault_point: str | None, delay: float = 0.0) -> None:
        """Report a write from a task: a failed append (after ``delay``), or one stopped
        at a fault point once it is fsynced."""
        if delay:
            await asyncio.sleep(delay)
            if self.stopped:
                return  # (the next start recovers it from the log)
        if plog is not None:
            try:
                await self.logs.flusher.wait_durable(plog, last + 1)
            except OSError:  # its fsync failed (LogOfflineError): not durable, not acted on
                error = coordinator_append_error(_E.kafka_storage_error)
        if error == _E.none.value and fault_point is not None and self.faults is not None:
            await self.faults.hit(fault_point)
        self.apply(self.adapter.persisted(now_ms(), write_id, error))
