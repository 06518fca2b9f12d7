"""Kafka error codes and the exceptions that carry them.

The codes are kio's ``ErrorCode`` enum (generated from Kafka's own list), so
names match Kafka's ``Errors`` in lower case (``ErrorCode.corrupt_message``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "KafkaError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
    "InvalidRequestError",
    "RecordError",
    "RecordValidationError",
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


@dataclass(frozen=True, slots=True)
class RecordError:
    """KIP-467: one record that made its batch fail, by its index in the batch."""

    batch_index: int
    message: str
    timestamp: bool = False  # a timestamp reason (INVALID_TIMESTAMP), else INVALID_RECORD


class RecordValidationError(KafkaError):
    """A batch refused because of some of its records (Kafka's RecordValidationException):
    the ProduceResponse names them in record_errors. Any timestamp reason makes the
    batch's code INVALID_TIMESTAMP, else it is INVALID_RECORD; the message is Kafka's."""

    def __init__(self, record_errors: list[RecordError]) -> None:
        self.record_errors = record_errors
        if any(e.timestamp for e in record_errors):
            super().__init__("One or more records have been rejected due to invalid timestamp",
                             ErrorCode.invalid_timestamp)
            return
        shown = ", ".join(f"RecordError(batchIndex={e.batch_index}, message='{e.message}')"
                          for e in record_errors[:3])
        super().__init__(
            f"One or more records have been rejected due to {len(record_errors)} record errors "
            f"in total, and only showing the first three errors at most: [{shown}]",
            ErrorCode.invalid_record)


class UnsupportedCompressionError(KafkaError):
    code = ErrorCode.unsupported_compression_type


class InvalidRequestError(KafkaError):
    """The request cannot be parsed; Kafka closes the connection for these."""

    code = ErrorCode.invalid_request
