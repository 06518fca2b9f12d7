"""Helpers shared by the group handlers."""

from __future__ import annotations

import datetime

from protocol.errors import ErrorCode

ZERO = datetime.timedelta(0)


def ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def code(value: int) -> ErrorCode:
    return ErrorCode(value)


def client_host(peer: str) -> str:
    # Kafka reports "/host" for the member's address.
    return "/" + peer.rsplit(":", 1)[0]
