"""``txbroker.faults`` in tests: install faults in a running broker from the test's own
thread (docs/fault-injection.md).

    fault = txbroker.faults.add(api="Produce", topic="orders", partition=0,
                                error="NOT_LEADER_OR_FOLLOWER", count=3)
    ...
    assert fault.fired == 3
    fault.remove()

BrokerFaults drives an in-process broker (its calls run on the broker's loop);
HttpFaults drives a broker process through its admin endpoint (``POST/GET/DELETE
/faults``), with the same methods except callables, which cannot cross a process.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


class FixtureFault:
    """A fault installed by the fixture: ``fired``, ``seen``, ``active``, ``remove()``."""

    def __init__(self, fault, run: Callable) -> None:
        self._fault = fault  # request_faults.Fault, read across threads (plain ints)
        self._run = run

    @property
    def id(self) -> str:
        return self._fault.id

    @property
    def fired(self) -> int:
        return self._fault.fired

    @property
    def seen(self) -> int:
        return self._fault.seen

    @property
    def active(self) -> bool:
        return self._fault.active

    def remove(self) -> None:
        self._run(lambda broker: broker.faults.remove(self._fault.id))

    def describe(self) -> dict[str, Any]:
        return self._fault.describe()

    def __repr__(self) -> str:
        return f"FixtureFault({self.describe()})"


class _Shortcuts:
    """Faults named by what they do, for both kinds of broker."""

    def add(self, spec: dict[str, Any] | None = None, /, **values: Any) -> Any:
        raise NotImplementedError

    def arm(self, point: str, action: str = "crash") -> Any:
        """A commit-protocol point (``add(point=..., action=...)``), as before."""
        return self.add(point=point, action=action)

    def refuse_connections(self, count: int | None = None) -> Any:
        """New connections are closed as they are accepted (``count`` of them)."""
        return self.add(connections="refuse", count=count)

    def crash_now(self, power_loss: bool = False) -> Any:
        """The broker crashes (or loses power) a moment from now; a broker process
        exits with 137. (The fixture's own ``crash()`` does this at once.)"""
        return self.add(broker="power_loss" if power_loss else "crash")

    def fail_fsync(self, topic: str | None = None, partition: int | None = None, *,
                   count: int | None = None, after: int = 0, errno: str = "EIO") -> Any:
        """The flusher's next ``count`` fsyncs (after ``after``) of ``topic``/``partition``
        (default: every partition) fail with ``errno`` (EIO, ENOSPC, EDQUOT, EROFS,
        ENOTCONN): each takes its partition offline until a restart."""
        spec: dict[str, Any] = {"fsync": errno, "count": count, "after": after}
        if topic is not None:
            spec["topic"] = topic
        if partition is not None:
            spec["partition"] = partition
        return self.add(spec)

    def hang(self, ms: int) -> Any:
        """The broker serves and answers nothing for ``ms`` ms, on every connection (a
        long GC pause); then the held requests are served. ``fired``: requests held;
        ``remove()`` ends it early."""
        return self.add(broker="hang", ms=ms)


class BrokerFaults(_Shortcuts):
    """The faults of an in-process broker (testing/broker_thread.py)."""

    def __init__(self, run: Callable) -> None:
        self._run = run  # run(fn): fn(broker) on the broker's loop, its result

    def add(self, spec: dict[str, Any] | None = None, /, **values: Any) -> FixtureFault:
        """Install a fault (keys: docs/fault-injection.md); ValueError when it is wrong."""
        fault = self._run(lambda broker: broker.faults.add(spec, **values))
        return FixtureFault(fault, self._run)

    def list(self) -> list[dict[str, Any]]:
        return self._run(lambda broker: [f.describe() for f in broker.faults.list()])

    def remove(self, fault_id: str) -> None:
        self._run(lambda broker: broker.faults.remove(fault_id))

    def clear(self) -> None:
        self._run(lambda broker: broker.faults.clear())

    def disarm(self, point: str | None = None) -> None:
        self._run(lambda broker: broker.faults.disarm(point))

    @property
    def fired(self) -> list[str]:
        """The commit-protocol points that fired, in order."""
        return self._run(lambda broker: list(broker.faults.fired))

    @property
    def armed(self) -> dict[str, str]:
        return self._run(lambda broker: dict(broker.faults.armed))


class HttpFault:
    """A fault of a broker process; its counts are read from the admin endpoint."""

    def __init__(self, faults: HttpFaults, data: dict[str, Any]) -> None:
        self._faults = faults
        self.id = data["id"]

    def describe(self) -> dict[str, Any]:
        return self._faults.get(self.id)

    @property
    def fired(self) -> int:
        return self.describe()["fired"]

    @property
    def seen(self) -> int:
        return self.describe()["seen"]

    @property
    def active(self) -> bool:
        return self.describe()["active"]

    def remove(self) -> None:
        self._faults.remove(self.id)


class HttpFaults(_Shortcuts):
    """The faults of a broker process, through its admin endpoint (``admin.http.port``)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace").strip()
            if e.code == 400:
                raise ValueError(text) from None
            raise RuntimeError(f"{method} {path}: HTTP {e.code}: {text}") from None

    def add(self, spec: dict[str, Any] | None = None, /, **values: Any) -> HttpFault:
        data = self._call("POST", "/faults", {**(spec or {}), **values})
        return HttpFault(self, data[0])

    def get(self, fault_id: str) -> dict[str, Any]:
        return self._call("GET", f"/faults/{fault_id}")

    def list(self) -> list[dict[str, Any]]:
        return self._call("GET", "/faults")

    def remove(self, fault_id: str) -> None:
        self._call("DELETE", f"/faults/{fault_id}")

    def clear(self) -> None:
        self._call("DELETE", "/faults")
