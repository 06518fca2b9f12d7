"""DescribeLogDirs (key 35): the one log directory (the data directory) with the size of
each partition's log, for kafka-log-dirs and Admin.describeLogDirs. One broker has no
replicas to catch up or move, so every offset lag is 0 and nothing is a future log.
Version 0 is gone from Kafka 4 (KIP-896). v5 (Kafka 4.4) adds ``is_cordoned``: this broker
has no way to cordon its log directory, so it is always false."""

from __future__ import annotations

import datetime
import os

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5

_ZERO = datetime.timedelta(0)


def _wanted(logs, request) -> dict[str, list[int]]:
    """topic -> partitions to describe: all of them (topics null), else the ones asked
    for that exist (Kafka leaves unknown ones out)."""
    if request.topics is None:
        return {name: list(range(info.partitions)) for name, info in sorted(logs.topics.items())}
    out: dict[str, list[int]] = {}
    for t in request.topics:
        info = logs.topics.get(t.topic)
        if info is None:
            continue
        chosen = out.setdefault(t.topic, [])
        for p in t.partitions:
            if 0 <= p < info.partitions and p not in chosen:
                chosen.append(p)
    return out


async def handle(ctx: RequestContext, request):
    logs = ctx.broker.logs
    schema = ctx.schema
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return build(ctx.response_type, throttle_time=_ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    topics = []
    for name, partitions in _wanted(logs, request).items():
        parts = tuple(
            build(schema.DescribeLogDirsPartition, partition_index=p,
                  partition_size=logs.get_log(name, p).size_bytes, offset_lag=0,
                  is_future_key=False)
            for p in partitions)
        if parts:
            topics.append(build(schema.DescribeLogDirsTopic, name=name, partitions=parts))
    try:
        fs = os.statvfs(logs.data_dir)
        total, usable = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
    except OSError:
        total = usable = -1
    result = build(schema.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=logs.data_dir,
                   topics=tuple(topics), total_bytes=total, usable_bytes=usable,
                   is_cordoned=False)
    return build(ctx.response_type, throttle_time=_ZERO, error_code=ErrorCode.none,
                 results=(result,))
