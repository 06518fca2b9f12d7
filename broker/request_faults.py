"""The installed faults of a running broker: request faults, connection faults and the
commit-protocol points, in one list (docs/fault-injection.md).

Cost: the server asks ``if fault_apis and api_key in fault_apis`` per request, so with no
fault installed a request pays one truth test of an empty dict. Faults are indexed by
API key, and those that name a topic by topic too, so faults that match nothing cost
one dict lookup per topic of a request of their API.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from txbroker.coordinator.transaction.faults import FaultInjector
from txbroker.protocol.messages import api_name

from . import partition_faults as pf
from .context import CloseConnection
from .hang import BrokerHang

if TYPE_CHECKING:
    from .fault_spec import FaultSpec

log = logging.getLogger("txbroker.faults")


def _parse_spec(spec: Mapping[str, Any], **options: Any) -> FaultSpec:
    """fault_spec.parse_spec, that module loaded when a broker first installs a fault
    (a broker without faults never does: it is not part of the start-up)."""
    from .fault_spec import parse_spec

    return parse_spec(spec, **options)


class Fault:
    """One installed fault: ``fired`` counts the requests (or connections, or the point)
    it acted on; ``seen`` every match, including those let through by ``after``."""

    def __init__(self, fault_id: str, spec: FaultSpec) -> None:
        self.id = fault_id
        self.spec = spec
        self.fired = 0
        self.seen = 0
        self.active = True
        self._table: FaultTable | None = None

    def remove(self) -> None:
        """Uninstall (on the broker's loop; the fixture's handle does that for you)."""
        if self._table is not None:
            self._table.remove(self.id)

    def take(self) -> bool:
        """One more match: True when the fault acts on it (within its budget)."""
        self.seen += 1
        if self.seen <= self.spec.after:
            return False
        self.fired += 1
        if self.spec.count is not None and self.fired >= self.spec.count:
            self.remove()
        return True

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, **self.spec.describe(), "fired": self.fired, "seen": self.seen,
                "active": self.active}

    def __repr__(self) -> str:
        return f"Fault({self.describe()})"


@dataclass(slots=True)
class ApiFaults:
    """The faults of one API key: those that match any topic, and those by topic."""

    any_topic: list[Fault] = field(default_factory=list)
    by_topic: dict[str, list[Fault]] = field(default_factory=dict)


@dataclass(slots=True)
class FaultCall:
    """What a ``callable`` fault sees: return a response message from ``fn(call)`` to
    answer with it instead of ``response`` (None keeps the broker's answer)."""

    api_key: int
    api: str
    version: int
    client_id: str | None
    principal: str
    request: Any
    response: Any


class FaultTable:
    def __init__(self, injector: FaultInjector, *, topic_names: Callable[[], Mapping] = dict,
                 crash: Callable[[str, bool], None] | None = None,
                 fsync_faults: list | None = None) -> None:
        """``topic_names()`` is {topic id: name} (Produce v13 names topics by id);
        ``crash(why, power_loss)`` crashes the broker (server.Broker.crash);
        ``fsync_faults`` the flusher's list of fsync fault hooks (Flusher.fsync_faults)."""
        self._crash = crash
        self._fsync_faults = fsync_faults if fsync_faults is not None else []
        self._fsync_hooks: dict[str, Callable] = {}  # fault id -> its hook in that list
        self.points = injector
        injector.on_fired = self._point_fired
        self.by_api: dict[int, ApiFaults] = {}  # the server's per-request check reads this
        self.connection_faults: list[Fault] = []
        self.hang = BrokerHang()  # the server tests hang.on per request
        self._faults: dict[str, Fault] = {}
        self._ids = itertools.count(1)
        self._topic_names = topic_names
        for point, action in list(injector.armed.items()):
            self._install(_parse_spec({"point": point, "action": action}))

    # --- installing ----------------------------------------------------------------

    def add(self, spec: Mapping[str, Any] | None = None, /, **values: Any) -> Fault:
        """Install one fault (plain data, fault_spec.py); ValueError if it is wrong."""
        return self._install(_parse_spec({**(spec or {}), **values}))

    def add_json(self, specs: Any) -> list[Fault]:
        """Install faults given as JSON (one object or a list); all or none."""
        items = specs if isinstance(specs, list) else [specs]
        parsed = [_parse_spec(s, allow_callable=False) for s in items]
        return [self._install(s) for s in parsed]

    def adopt(self, faults: Iterable[Fault]) -> None:
        """Install faults of a broker this one replaces (a restart): same ids, counts."""
        for fault in faults:
            # A restart ends a hang, as it ends a real broker's pause.
            if fault.active and fault.spec.kind not in ("point", "hang", "crash"):
                while fault.id in self._faults:  # (the handles hold the object, not the id)
                    fault.id = f"f{next(self._ids)}"
                self._insert(fault)

    def _install(self, spec: FaultSpec) -> Fault:
        fault = Fault(f"f{next(self._ids)}", spec)
        while fault.id in self._faults:
            fault.id = f"f{next(self._ids)}"
        if spec.kind == "point":
            self.points.arm(spec.point, spec.action)
            # Arming a point again replaces the earlier arming, as before.
            for other in list(self._faults.values()):
                if other.spec.kind == "point" and other.spec.point == spec.point:
                    self._forget(other)
        self._insert(fault)
        log.warning("fault %s installed: %s", fault.id, spec.describe())
        return fault

    def _insert(self, fault: Fault) -> None:
        fault._table = self
        fault.active = True
        self._faults[fault.id] = fault
        spec = fault.spec
        if spec.kind == "connection":
            self.connection_faults.append(fault)
        elif spec.kind == "hang":
            self.hang.begin(fault, lambda f: self.remove(f.id))
        elif spec.kind == "crash":
            self._crash_soon(fault)
        elif spec.kind == "fsync":
            hook = _fsync_hook(fault)
            self._fsync_hooks[fault.id] = hook
            self._fsync_faults.append(hook)
        elif spec.kind == "request":
            from .fault_spec import ANY_API
            from .handlers import HANDLER_TABLE

            keys = HANDLER_TABLE if ANY_API in spec.api_keys else spec.api_keys
            for key in keys:
                bucket = self.by_api.setdefault(key, ApiFaults())
                if spec.topic is None:
                    bucket.any_topic.append(fault)
                else:
                    bucket.by_topic.setdefault(spec.topic, []).append(fault)

    # --- listing and removing ---------------------------------------------------------

    def get(self, fault_id: str) -> Fault | None:
        return self._faults.get(fault_id)

    def list(self) -> list[Fault]:
        return list(self._faults.values())

    def active(self) -> list[Fault]:
        return [f for f in self._faults.values() if f.active]

    def remove(self, fault_id: str) -> Fault | None:
        """Uninstall a fault (it stays listed, inactive, with its counts); None if unknown."""
        fault = self._faults.get(fault_id)
        if fault is None or not fault.active:
            return fault
        fault.active = False
        spec = fault.spec
        if spec.kind == "point":
            if self.points.armed.get(spec.point) == spec.action:
                self.points.disarm(spec.point)
        elif spec.kind == "connection":
            self.connection_faults.remove(fault)
        elif spec.kind == "hang":
            self.hang.end(fault)
        elif spec.kind == "crash":
            pass  # (it fired as it was installed)
        elif spec.kind == "fsync":
            hook = self._fsync_hooks.pop(fault.id, None)
            if hook in self._fsync_faults:
                self._fsync_faults.remove(hook)
        else:
            for key, bucket in list(self.by_api.items()):
                group = bucket.any_topic if spec.topic is None else bucket.by_topic.get(
                    spec.topic, [])
                if fault in group:
                    group.remove(fault)
                if spec.topic is not None and not group:
                    bucket.by_topic.pop(spec.topic, None)
                if not bucket.any_topic and not bucket.by_topic:
                    del self.by_api[key]  # no fault left for this API: back to no cost
        log.warning("fault %s removed (fired %d times)", fault.id, fault.fired)
        return fault

    def _forget(self, fault: Fault) -> None:
        fault.active = False
        self._faults.pop(fault.id, None)

    def clear(self) -> None:
        """Remove every fault and forget them."""
        for fault in list(self._faults.values()):
            self.remove(fault.id)
        self._faults.clear()

    # --- the commit-protocol points (coordinator/transaction/faults.py) ------------------

    def arm(self, point: str, action: str = "crash") -> Fault:
        return self.add(point=point, action=action)

    def arm_from_config(self, text: str) -> None:
        self.points.arm_from_config(text)
        for point, action in list(self.points.armed.items()):
            if not any(f.spec.point == point and f.active for f in self._faults.values()):
                self._install(_parse_spec({"point": point, "action": action}))

    def disarm(self, point: str | None = None) -> None:
        for fault in list(self._faults.values()):
            if fault.spec.kind == "point" and point in (None, fault.spec.point):
                self.remove(fault.id)
        self.points.disarm(point)

    @property
    def armed(self) -> dict[str, str]:
        return self.points.armed

    @property
    def fired(self) -> list[str]:
        """The points that fired, in order (as before the points joined this table)."""
        return self.points.fired

    def config_text(self) -> str:
        return self.points.config_text()

    async def hit(self, point: str, **kwargs: Any) -> bool:
        return await self.points.hit(point, **kwargs)

    def _point_fired(self, point: str) -> None:
        for fault in self._faults.values():
            if fault.active and fault.spec.kind == "point" and fault.spec.point == point:
                fault.seen += 1
                fault.fired += 1
                fault.active = False
                return

    def _crash_soon(self, fault: Fault) -> None:
        """A broker crash or power loss on demand: a moment from now, so that whoever
        asked (the admin endpoint) gets its answer first."""
        assert self._crash is not None, "FaultTable(crash=...) not given"
        fault.seen = fault.fired = 1
        fault.active = False
        power_loss = fault.spec.action == "power_loss"
        asyncio.get_running_loop().call_later(0.1, self._crash, f"fault {fault.id}", power_loss)

    # --- connections --------------------------------------------------------------------

    def refuse_connection(self) -> bool:
        """A new connection: True when a fault refuses it."""
        for fault in list(self.connection_faults):
            if fault.take():
                return True
        return False

    # --- requests -------------------------------------------------------------------------

    def matching(self, ctx, request) -> tuple[list[Fault], dict[tuple[Any, int], int]]:
        """The faults acting on this request (their budgets taken), and for APIs with
        per-partition errors the error of each faulted partition."""
        api_key, version = ctx.header.api_key, ctx.header.api_version
        bucket = self.by_api.get(api_key)
        if bucket is None:
            return [], {}
        paths = pf.paths_for(api_key, version)
        parts: list[tuple[Any, int]] = []
        names: dict[Any, str] = {}
        if paths is not None:
            parts = pf.request_partitions(paths, request)
            if paths.req_name == "topic_id" and bucket.by_topic:
                by_id = self._topic_names()
                names = {key: by_id.get(key, "") for key, _ in parts}
        candidates = list(bucket.any_topic)
        if bucket.by_topic:
            seen_topics = {names.get(key, key) for key, _ in parts}
            for topic in seen_topics:
                candidates.extend(bucket.by_topic.get(topic, ()))
        acting: list[Fault] = []
        errors: dict[tuple[Any, int], int] = {}
        for fault in candidates:
            spec = fault.spec
            if not _matches_request(spec, ctx, request):
                continue
            hit = parts if spec.topic is None else [
                (key, p) for key, p in parts if names.get(key, key) == spec.topic
                and spec.partition in (None, p)]
            if paths is not None and not hit:
                continue
            if spec.error is not None and paths is not None:
                fresh = [tp for tp in hit if tp not in errors]
                if not fresh or not fault.take():
                    continue
                for tp in fresh:
                    errors[tp] = spec.error
                acting.append(fault)
            elif fault.take():
                acting.append(fault)
        return acting, errors

    async def apply(self, ctx, request, handler) -> Any:
        """Serve ``request`` through ``handler`` with the matching faults' actions."""
        acting, errors = self.matching(ctx, request)
        if not acting:
            return await handler.handle(ctx, request)
        api_key, version = ctx.header.api_key, ctx.header.api_version
        name = api_name(api_key)
        for fault in acting:
            log.info("fault %s fired on %s v%d from %s (%d of %s)", fault.id, name, version,
                     ctx.peer, fault.fired, fault.spec.count or "unlimited")
        specs = [f.spec for f in acting]
        if any(s.close for s in specs):
            raise CloseConnection
        delay = max((s.delay_ms or 0) for s in specs)
        if delay:
            await asyncio.sleep(delay / 1000)
        whole = next((s.error for s in specs if s.error is not None and not errors), None)
        if whole is not None:
            try:
                response = pf.error_response(api_key, version, request, whole)
            except ValueError as e:
                log.warning("fault: %s; served as is", e)
                response = await handler.handle(ctx, request)
        elif errors:
            paths = pf.paths_for(api_key, version)
            assert paths is not None
            rest = None if paths.all_or_nothing else pf.without(paths, request, set(errors))
            served = None
            if rest is not None:
                served = pf.as_message(api_key, version, await handler.handle(ctx, rest))
                if served is None:  # acks=0: no answer for the rest, none for the faults
                    return None
            response = pf.with_partition_errors(api_key, version, paths, served, request,
                                                errors)
        else:
            response = await handler.handle(ctx, request)
        for spec in specs:
            if spec.callable is not None:
                call = FaultCall(api_key, name, version, ctx.header.client_id, ctx.principal,
                                 request, pf.as_message(api_key, version, response))
                replaced = spec.callable(call)
                if asyncio.iscoroutine(replaced):
                    replaced = await replaced
                response = call.response if replaced is None else replaced
        if any(s.drop for s in specs):
            # Served, never answered: the connection stays silent until the client gives
            # up on it (its request timeout) and closes it, as after a lost response.
            session = ctx.session
            if session.held is None:
                session.held = asyncio.get_running_loop().create_future()
            # Cancelled when the connection ends (connection.py); bounded all the same
            # (a connection whose reader waits on this Fetch would not see the client go).
            idle = ctx.broker.config.get("connections.max.idle.ms") / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(session.held), idle)
            raise CloseConnection
        return response


def _fsync_hook(fault: Fault) -> Callable[[Any], int | None]:
    """The flusher's hook for an fsync fault: called with a partition log whose fsync
    succeeded, it returns the errno to report instead while the budget lasts."""
    spec = fault.spec

    def hook(plog: Any) -> int | None:
        if spec.topic is not None and (plog.topic != spec.topic or spec.partition not in (
                None, plog.partition)):
            return None
        if not fault.active or not fault.take():
            return None
        log.warning("fault %s fired: the fsync of %s fails with %s (%d of %s)", fault.id,
                    plog.name, spec.source.get("fsync") if spec.source else spec.fsync_errno,
                    fault.fired, spec.count or "unlimited")
        return spec.fsync_errno

    return hook


def _matches_request(spec: FaultSpec, ctx, request) -> bool:
    if spec.version is not None and spec.version != ctx.header.api_version:
        return False
    if spec.client_id is not None and spec.client_id != ctx.header.client_id:
        return False
    if spec.except_client_id is not None and spec.except_client_id == ctx.header.client_id:
        return False
    if spec.principal is not None and spec.principal != ctx.principal:
        return False
    if spec.transactional_id is not None and spec.transactional_id not in _ids(
            request, ("transactional_id", "v3_and_below_transactional_id"), 1):
        return False
    if spec.group_id is not None and spec.group_id not in _ids(request, ("group_id",), 0):
        return False
    return True


def _ids(request, fields: tuple[str, ...], key_type: int) -> list[str]:
    """The transactional ids (key_type 1) or group ids (0) a request names, also as
    FindCoordinator keys and OffsetFetch v8+ groups."""
    out = [v for f in fields if (v := getattr(request, f, None)) is not None]
    if getattr(request, "key_type", None) == key_type:  # FindCoordinator
        key = getattr(request, "key", None)
        out.extend([key] if key is not None else getattr(request, "coordinator_keys", ()))
    if key_type == 0 and getattr(request, "groups", None):
        out.extend(getattr(g, "group_id", None) for g in request.groups)
    return out
