"""Kafka error codes and the exceptions that carry them.

The codes are kio's ``ErrorCode`` enum (generated from Kafka's own list), so
names match Kafka's ``Errors`` in lower case (``ErrorCode.corrupt_message``).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "KafkaError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
    "InvalidRequestError",
]


class KafkaError(Exception):
    """An error that maps to one Kafka error code."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class CorruptRecordError(KafkaError):
    """CRC mismatch, inconsistent lengths or offsets inside a record batch."""

    code = ErrorCode.corrupt_message


class InvalidRecordError(KafkaError):
    """A well-formed batch the broker refuses (wrong magic, control batch from a client...)."""

    code = ErrorCode.invalid_record


class RecordTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class InvalidTimestampError(KafkaError):
    """A record timestamp outside the topic's accepted range."""

    code = ErrorCode.invalid_timestamp


class UnsupportedCompressionError(KafkaError):
    code = ErrorCode.unsupported_compression_type


class InvalidRequestError(KafkaError):
    """The request cannot be parsed; Kafka closes the connection for these."""

    code = ErrorCode.invalid_request
