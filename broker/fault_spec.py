"""A fault as plain data: what it matches, what it does, how often (docs/fault-injection.md).

The same dictionary comes from the pytest fixture (``txbroker.faults.add(**spec)``), the
admin endpoint (``POST /faults``, JSON), ``txbroker faults add`` and the broker's
``txbroker.faults`` config key. ``parse_spec`` checks it whole and says what is wrong
(ValueError), so a typo never becomes a fault that silently matches nothing.

Request faults:
  match    api (name like "Produce"/"list_offsets", key, or a list of them; "*" every
           API), version, client_id, principal, topic, partition, transactional_id,
           group_id; except_client_id lets that client's requests through (uncounted)
  action   error (Kafka's name or number) | delay_ms | drop (serve, never answer: the
           connection goes silent) | close (close the connection, request not served) |
           callable (in-process only: ``fn(call)`` may return a replacement answer)
  budget   count (None: until removed), after (matches let through first)
Commit-protocol points: ``point`` and ``action`` (crash, power_loss, delay:MS, drop,
expire), as coordinator/transaction/faults.py; they fire once.
Connection faults: ``connections="refuse"`` (accepted, then closed at once), with count.
Broker faults: ``broker="hang"`` with ``ms``: nothing served or answered for that long
(broker/hang.py); ``broker="crash"`` or ``"power_loss"``: the broker crashes now (on
demand only, not from the configuration).
Storage faults: ``fsync`` with an errno name (EIO, ENOSPC, EDQUOT, EROFS, ENOTCONN):
the flusher's fsyncs of the matched partitions (``topic``, ``partition``: default every
one) report that error, ``count`` of them after ``after``; a failed fsync takes its
partition offline until a restart (storage/flusher.py).
``profile`` names a preset (PROFILES) whose keys the spec's own override.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from txbroker.coordinator.transaction.faults import check_fault_point
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import api_key_map

from .partition_faults import PARTITION_APIS

_API_KEYS = {name.replace("_", ""): key for key, name in api_key_map.items()}
ANY_API = -1

# APIs a client sends to the group or transaction coordinator: where a coordinator
# "move" shows (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), as Kafka answers them.
COORDINATOR_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
                    "OffsetFetch", "TxnOffsetCommit", "InitProducerId", "AddPartitionsToTxn",
                    "AddOffsetsToTxn", "EndTxn")
# Leader "moves": a single broker shows them as NOT_LEADER_OR_FOLLOWER on the APIs a
# partition leader serves; clients refresh metadata, find the same broker, and retry.
LEADER_APIS = ("Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch", "DeleteRecords")
PROFILES: dict[str, dict[str, Any]] = {
    "coordinator_moved": {"api": COORDINATOR_APIS, "error": "NOT_COORDINATOR"},
    "coordinator_loading": {"api": COORDINATOR_APIS, "error": "COORDINATOR_LOAD_IN_PROGRESS"},
    "leader_moved": {"api": LEADER_APIS, "error": "NOT_LEADER_OR_FOLLOWER"},
}

MATCH_KEYS = ("api", "version", "client_id", "principal", "topic", "partition",
              "transactional_id", "group_id", "except_client_id")
ACTION_KEYS = ("error", "delay_ms", "drop", "close", "callable")
KEYS = frozenset((*MATCH_KEYS, *ACTION_KEYS, "count", "after", "profile", "point", "action",
                  "connections", "broker", "ms", "fsync", "id"))
BROKER_ACTIONS = ("hang", "crash", "power_loss")
# The errors a failing disk or file system gives fsync (storage faults).
FSYNC_ERRNOS = ("EIO", "ENOSPC", "EDQUOT", "EROFS", "ENOTCONN")


@dataclass(frozen=True, slots=True)
class FaultSpec:
    kind: str  # "request", "point", "connection", "hang", "crash" or "fsync"
    api_keys: frozenset[int] = frozenset()  # {ANY_API} for every API
    version: int | None = None
    client_id: str | None = None
    except_client_id: str | None = None
    principal: str | None = None
    topic: str | None = None
    partition: int | None = None
    transactional_id: str | None = None
    group_id: str | None = None
    error: int | None = None
    delay_ms: int | None = None
    drop: bool = False
    close: bool = False
    callable: Callable[..., Any] | None = None
    count: int | None = None
    after: int = 0
    point: str | None = None
    action: str | None = None
    hang_ms: int | None = None
    fsync_errno: int | None = None  # kind "fsync": the errno its fsyncs fail with
    source: Mapping[str, Any] | None = None  # what was asked, for listings

    def describe(self) -> dict[str, Any]:
        """The spec as JSON-able plain data (what list/GET show)."""
        out = {k: v for k, v in (self.source or {}).items() if k != "callable"}
        if self.callable is not None:
            out["callable"] = getattr(self.callable, "__qualname__", repr(self.callable))
        return out


def _api_key(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"api {value!r} is neither an API name nor a key")
    if isinstance(value, int):
        if value not in api_key_map:
            raise ValueError(f"unknown API key {value}")
        return value
    if isinstance(value, str):
        if value == "*":
            return ANY_API
        if value.strip().lstrip("-").isdigit():
            return _api_key(int(value))
        key = _API_KEYS.get(value.replace("_", "").replace("-", "").lower())
        if key is None:
            raise ValueError(f"unknown API {value!r} (a Kafka API name such as Produce, "
                             f"TxnOffsetCommit, or its key)")
        return key
    raise ValueError(f"api {value!r} is neither an API name nor a key")


def _error_code(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"error {value!r} is not a Kafka error")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int):
        try:
            code = ErrorCode(value)
        except ValueError:
            raise ValueError(f"unknown Kafka error code {value}") from None
    elif isinstance(value, str):
        try:
            code = ErrorCode[value.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown Kafka error {value!r} (a name such as "
                             f"NOT_LEADER_OR_FOLLOWER, or its code)") from None
    else:
        raise ValueError(f"error {value!r} is not a Kafka error name or code")
    if code == ErrorCode.none:
        raise ValueError("error NONE is not a fault")
    return code.value


def _int(spec: Mapping[str, Any], key: str, low: int) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{key} must be an integer, not {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{key} must be an integer, not {value!r}") from None
    if number < low:
        raise ValueError(f"{key} must be at least {low}, not {number}")
    return number


def _str(spec: Mapping[str, Any], key: str) -> str | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    return value


def parse_spec(spec: Mapping[str, Any], *, allow_callable: bool = True) -> FaultSpec:
    """A checked FaultSpec from plain data; ValueError saying what is wrong.
    ``allow_callable`` is False where the spec came as JSON (admin endpoint, config)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"a fault is a JSON object / dict, not {type(spec).__name__}")
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise ValueError(f"unknown fault key(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(KEYS - {'id'}))})")
    source = dict(spec)
    profile = spec.get("profile")
    if profile is not None:
        if profile not in PROFILES:
            raise ValueError(f"unknown fault profile {profile!r} "
                             f"(known: {', '.join(sorted(PROFILES))})")
        spec = {**PROFILES[profile], **{k: v for k, v in spec.items() if k != "profile"}}
    count = _int(spec, "count", 1)
    after = _int(spec, "after", 0) or 0
    if spec.get("point") is not None:
        return _point_spec(spec, source)
    if spec.get("fsync") is not None:
        return _fsync_spec(spec, source, count, after)
    if spec.get("broker") is not None or "ms" in spec:
        return _broker_spec(spec, source)
    if spec.get("connections") is not None:
        if spec["connections"] != "refuse":
            raise ValueError(f"connections must be \"refuse\", not {spec['connections']!r}")
        extra = sorted(k for k in (*MATCH_KEYS, *ACTION_KEYS, "action", "broker", "ms")
                       if k in spec)
        if extra:
            raise ValueError(f"a connections fault takes only count and after, not "
                             f"{', '.join(extra)}")
        return FaultSpec("connection", count=count, after=after, source=source)
    if "action" in spec:
        raise ValueError("action is for commit-protocol points (with point=...); a request "
                         "fault takes one of error, delay_ms, drop, close, callable")
    actions = [k for k in ACTION_KEYS if spec.get(k) not in (None, False)]
    if len(actions) != 1:
        raise ValueError(f"a request fault needs exactly one action of "
                         f"{', '.join(ACTION_KEYS)} (got {', '.join(actions) or 'none'})")
    if "api" not in spec:
        raise ValueError("a request fault needs api (a name such as Produce, a key, a list, "
                         "or \"*\" for every API)")
    apis = spec["api"]
    keys = frozenset(_api_key(a) for a in (apis if isinstance(apis, list | tuple) else [apis]))
    if not keys:
        raise ValueError("api is an empty list")
    if ANY_API in keys:
        keys = frozenset({ANY_API})
    fn = spec.get("callable")
    if fn is not None and not (allow_callable and callable(fn)):
        raise ValueError("callable is for in-process faults only (the pytest fixture), and "
                         "must be callable")
    for key in ("drop", "close"):
        if spec.get(key) not in (None, True, False):
            raise ValueError(f"{key} must be true or false, not {spec[key]!r}")
    if spec.get("error") is not None and ANY_API not in keys:
        from .partition_faults import can_answer_error

        mute = sorted(api_key_map[k] for k in keys if not can_answer_error(k))
        if mute:
            raise ValueError(f"{', '.join(mute)}: no error field to answer an error in "
                             f"(its errors are per resource; use delay_ms, drop or close)")
    topic, partition = _str(spec, "topic"), _int(spec, "partition", 0)
    if partition is not None and topic is None:
        raise ValueError("partition needs topic")
    if topic is not None:
        others = sorted(keys - set(PARTITION_APIS))
        if others:
            names = ", ".join(api_key_map.get(k, "*") for k in others)
            raise ValueError(f"topic/partition match only APIs that carry partitions "
                             f"({', '.join(api_key_map[k] for k in sorted(PARTITION_APIS))}), "
                             f"not {names}")
    return FaultSpec(
        "request", api_keys=keys, version=_int(spec, "version", 0),
        client_id=_str(spec, "client_id"), except_client_id=_str(spec, "except_client_id"),
        principal=_str(spec, "principal"),
        topic=topic, partition=partition,
        transactional_id=_str(spec, "transactional_id"), group_id=_str(spec, "group_id"),
        error=_error_code(spec["error"]) if spec.get("error") is not None else None,
        delay_ms=_int(spec, "delay_ms", 0), drop=bool(spec.get("drop")),
        close=bool(spec.get("close")), callable=fn, count=count, after=after,
        source=source)


def _point_spec(spec: Mapping[str, Any], source: dict) -> FaultSpec:
    extra = sorted(k for k in (*MATCH_KEYS, *ACTION_KEYS, "connections", "after", "broker",
                               "ms") if k in spec)
    if extra:
        raise ValueError(f"a commit-protocol point takes point and action, not "
                         f"{', '.join(extra)}")
    point = spec["point"]
    if spec.get("count") not in (None, 1):
        raise ValueError("a commit-protocol point fires once (count 1)")
    action = spec.get("action") or ("drop" if point == "drop_end_txn_response" else "crash")
    check_fault_point(point, action)
    return FaultSpec("point", point=point, action=action, count=1, source=source)


def _fsync_spec(spec: Mapping[str, Any], source: dict, count: int | None,
                after: int) -> FaultSpec:
    name = spec["fsync"]
    if name not in FSYNC_ERRNOS:
        raise ValueError(f"fsync must be one of {', '.join(FSYNC_ERRNOS)}, not {name!r}")
    extra = sorted(k for k in (*MATCH_KEYS, *ACTION_KEYS, "connections", "action", "broker",
                               "ms") if k in spec and k not in ("topic", "partition"))
    if extra:
        raise ValueError(f"an fsync fault takes topic, partition, count and after, not "
                         f"{', '.join(extra)}")
    topic, partition = _str(spec, "topic"), _int(spec, "partition", 0)
    if partition is not None and topic is None:
        raise ValueError("partition needs topic")
    return FaultSpec("fsync", topic=topic, partition=partition, count=count, after=after,
                     fsync_errno=getattr(_errno, name), source=source)


def _broker_spec(spec: Mapping[str, Any], source: dict) -> FaultSpec:
    if spec.get("broker") is None:
        raise ValueError("ms is for a broker hang ({\"broker\": \"hang\", \"ms\": N}); a "
                         "request is delayed with delay_ms")
    action = spec.get("broker")
    if action not in BROKER_ACTIONS:
        raise ValueError(f"broker must be one of {', '.join(BROKER_ACTIONS)}, not {action!r}")
    extra = sorted(k for k in (*MATCH_KEYS, *ACTION_KEYS, "connections", "action", "count",
                               "after") if k in spec)
    if action != "hang":
        extra += ["ms"] if "ms" in spec else []
        if extra:
            raise ValueError(f"a broker {action} takes no other key, not {', '.join(extra)}")
        return FaultSpec("crash", action=action, count=1, source=source)
    if extra:
        raise ValueError(f"a broker hang takes only ms, not {', '.join(extra)}")
    ms = _int(spec, "ms", 1)
    if ms is None:
        raise ValueError("a broker hang needs ms (how long nothing is answered)")
    return FaultSpec("hang", hang_ms=ms, count=1, source=source)


def load_fault_specs(text: str) -> list[dict[str, Any]]:
    """The ``txbroker.faults`` config value: inline JSON (an object or a list of them) or
    the path of a file holding it; each checked (ValueError). "" is no fault."""
    import json

    text = str(text).strip()
    if not text:
        return []
    where = "txbroker.faults"
    if text[0] not in "[{":
        try:
            with open(text) as f:
                body = f.read()
        except OSError as e:
            raise ValueError(f"txbroker.faults: cannot read {text}: {e.strerror}") from None
        where = text
    else:
        body = text
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON: {e}") from None
    items = data if isinstance(data, list) else [data]
    for i, item in enumerate(items):
        try:
            if parse_spec(item, allow_callable=False).kind == "crash":
                raise ValueError("a broker crash or power_loss is on demand only (at start-up "
                                 "it would crash every start); arm a commit-protocol point "
                                 "to crash at a given moment")
        except ValueError as e:
            raise ValueError(f"{where}: fault {i + 1}: {e}") from None
    return items
