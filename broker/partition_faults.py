"""Answers with a fault's error: per partition where the response has per-partition
errors (the rest of the request served for real), else in the top-level error field.

A request with faulted partitions is split: the handler serves a copy without them (a
produced batch for a faulted partition is never appended), and their error entries are
added to its answer, each with -1 offsets as Kafka answers a failed partition. Only
requests that a fault matched come here: the split costs nothing otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from functools import cache
from typing import Any, NamedTuple

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import (
    api_key_map,
    decode_response,
    encode_response,
    response_class,
)


class PartitionPaths(NamedTuple):
    """Where an API's request and response keep their topics and partitions."""

    req_topics: str
    req_name: str
    req_parts: str
    req_index: str | None  # None: the request's partitions are bare ints
    resp_topics: str
    resp_name: str
    resp_parts: str
    resp_index: str
    resp_error: str = "error_code"
    all_or_nothing: bool = False  # one failed partition fails the rest (not attempted)


_COMMON = PartitionPaths("topics", "name", "partitions", "partition_index",
                         "topics", "name", "partitions", "partition_index")
PARTITION_APIS: dict[int, PartitionPaths] = {
    0: PartitionPaths("topic_data", "name", "partition_data", "index",
                      "responses", "name", "partition_responses", "index"),
    1: PartitionPaths("topics", "topic", "partitions", "partition",
                      "responses", "topic", "partitions", "partition_index"),
    2: _COMMON,  # ListOffsets
    8: _COMMON,  # OffsetCommit
    21: _COMMON,  # DeleteRecords
    23: PartitionPaths("topics", "topic", "partitions", "partition",
                       "topics", "topic", "partitions", "partition"),
    # AddPartitionsToTxn v0-3 (what clients send); the coordinator adds all or none, so
    # the others are OPERATION_NOT_ATTEMPTED, as Kafka answers a partly failed add.
    24: PartitionPaths("v3_and_below_topics", "name", "partitions", None,
                       "results_by_topic_v3_and_below", "name", "results_by_partition",
                       "partition_index", "partition_error_code", all_or_nothing=True),
    28: _COMMON,  # TxnOffsetCommit
}
PRODUCE_TOPIC_IDS_SINCE = 13
ADD_PARTITIONS_BATCHED_SINCE = 4


def paths_for(api_key: int, version: int) -> PartitionPaths | None:
    paths = PARTITION_APIS.get(api_key)
    if paths is None:
        return None
    if api_key == 0 and version >= PRODUCE_TOPIC_IDS_SINCE:
        return paths._replace(req_name="topic_id", resp_name="topic_id")
    if api_key == 24 and version >= ADD_PARTITIONS_BATCHED_SINCE:
        return None  # broker-to-broker batches; clients send v0-3
    return paths


def request_partitions(paths: PartitionPaths, request: Any) -> list[tuple[Any, int]]:
    """(topic key, partition) of every partition the request names; the key is the
    name, or the topic id where the version names topics by id."""
    out = []
    for topic in getattr(request, paths.req_topics) or ():
        key = getattr(topic, paths.req_name)
        for part in getattr(topic, paths.req_parts):
            out.append((key, part if paths.req_index is None else getattr(part, paths.req_index)))
    return out


def without(paths: PartitionPaths, request: Any, faulted: set[tuple[Any, int]]) -> Any | None:
    """The request without the faulted partitions; None when nothing is left to serve."""
    topics = []
    for topic in getattr(request, paths.req_topics):
        key = getattr(topic, paths.req_name)
        parts = tuple(p for p in getattr(topic, paths.req_parts)
                      if (key, p if paths.req_index is None else getattr(p, paths.req_index))
                      not in faulted)
        if parts:
            topics.append(dataclasses.replace(topic, **{paths.req_parts: parts}))
    if not topics:
        return None
    return dataclasses.replace(request, **{paths.req_topics: tuple(topics)})


def as_message(api_key: int, version: int, response: Any) -> Any:
    """A handler's answer as a kio message (fast paths return encoded bytes)."""
    if type(response) is bytes:
        frame = encode_response(api_key, version, 0, response)
        return decode_response(api_key, version, bytes(frame)[4:])[1]
    return response


def with_partition_errors(api_key: int, version: int, paths: PartitionPaths, served: Any,
                          request: Any, errors: dict[tuple[Any, int], int]) -> Any:
    """``served`` (the answer to the request without the faulted partitions, or None)
    with an error entry for each faulted partition, in the request's topic order."""
    rtype = response_class(api_key, version)
    topic_cls, part_cls = _nested(rtype, paths.resp_topics, paths.resp_parts)
    if paths.all_or_nothing:
        errors = {tp: errors.get(tp, ErrorCode.operation_not_attempted.value)
                  for tp in request_partitions(paths, request)}
        served = None
    entries: dict[Any, list] = {}
    if served is not None:
        for topic in getattr(served, paths.resp_topics):
            entries.setdefault(getattr(topic, paths.resp_name), []).extend(
                getattr(topic, paths.resp_parts))
    # A failed Fetch partition carries empty records, not null ones, as Kafka's
    # (librdkafka cannot parse a null record set).
    extra = {"records": b""} if "records" in _fields(part_cls) else {}
    for (key, index), code in errors.items():
        entries.setdefault(key, []).append(blank(
            part_cls, **{paths.resp_index: index, paths.resp_error: ErrorCode(code)}, **extra))
    topics = tuple(blank(topic_cls, **{paths.resp_name: key, paths.resp_parts: tuple(parts)})
                   for key, parts in entries.items())
    if served is not None:
        return dataclasses.replace(served, **{paths.resp_topics: topics})
    top = {paths.resp_topics: topics}
    if "session_id" in _fields(rtype):
        top["session_id"] = 0  # Fetch: no session, as the fetch handler answers
    return blank(rtype, **top)


def error_response(api_key: int, version: int, request: Any, code: int) -> Any:
    """The answer of a whole-request API with ``code`` in its top-level error field
    (FindCoordinator v4+ and OffsetFetch v8+: in each key's or group's entry)."""
    rtype = response_class(api_key, version)
    error = ErrorCode(code)
    fields = _fields(rtype)
    if "error_code" in fields:
        return blank(rtype, error_code=error)
    if "coordinators" in fields:  # FindCoordinator v4+
        (cls,) = _nested(rtype, "coordinators")
        return blank(rtype, coordinators=tuple(
            blank(cls, key=key, error_code=error) for key in request.coordinator_keys))
    if "groups" in fields and api_key == 9:  # OffsetFetch v8+
        (cls,) = _nested(rtype, "groups")
        return blank(rtype, groups=tuple(
            blank(cls, group_id=g.group_id, error_code=error) for g in request.groups))
    raise ValueError(f"{api_key_map[api_key]} v{version} has no error field to answer with")


def can_answer_error(api_key: int) -> bool:
    """Whether an error fault has somewhere to put its error in this API's answer."""
    if api_key in PARTITION_APIS or api_key in (9, 10):
        return True
    from txbroker.broker.handlers import HANDLER_TABLE

    return "error_code" in _fields(response_class(api_key, HANDLER_TABLE[api_key][2]))


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _nested(cls: type, *names: str) -> tuple[type, ...]:
    """The entity classes of the array fields ``names`` (each inside the previous one)."""
    out = []
    for name in names:
        cls = typing.get_args(_hints(cls)[name])[0]
        out.append(cls)
    return tuple(out)


def blank(cls: type, **values: Any) -> Any:
    """An entity with ``values`` and, for every other field, its default or what Kafka
    answers for a failed entry (-1 numbers, empty arrays, null/empty strings)."""
    hints = _hints(cls)
    for name, field in _fields(cls).items():
        if name in values:
            continue
        if field.default is not dataclasses.MISSING:
            values[name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            values[name] = field.default_factory()
        else:
            values[name] = _empty(hints[name])
    return cls(**values)


def _empty(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return ()
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        return None
    if isinstance(hint, type):
        if issubclass(hint, ErrorCode):
            return ErrorCode.none
        if issubclass(hint, bool):
            return False
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(hint, int):
            return -1
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if issubclass(hint, uuid.UUID):
            return uuid.UUID(int=0)
        if dataclasses.is_dataclass(hint):
            return blank(hint)
    if getattr(hint, "__supertype__", None) is not None:  # a NewType
        return _empty(hint.__supertype__)
    raise TypeError(f"no empty value for {hint!r}")
