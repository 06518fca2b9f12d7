"""The offset map of a cleaning: key -> offset of its latest record, over the dirty part.

Why a module of its own: it is the first worker-thread step of a cleaning (after
Kafka's Cleaner.buildOffsetMap and its OffsetMap), a scan of keys only, and what it
builds is all the rewrite needs to know about later records of a key. Records of
aborted transactions and control batches never enter the map (they must never count
as a key's latest value). The clean part, below the cleaner checkpoint, is not
scanned: its keys are unique and older than the dirty ones.
"""

from __future__ import annotations

from txbroker.protocol.errors import CorruptRecordError
from txbroker.protocol.records import decode_records

from .cleaner_filter import FilterContext, in_aborted_txn
from .cleaner_job import CleanerError, CleaningJob, checked_batch, read_batches


def build_offset_map(job: CleaningJob) -> FilterContext:
    """key -> offset of its latest record in the dirty part of the cleanable range."""
    offset_map: dict[bytes, int] = {}
    for src in job.sources:
        if src.end_offset <= job.first_dirty:
            continue  # clean already: its keys are unique and older than the dirty ones
        for header, data in read_batches(src.fd, src.size, job.abort):
            if header.is_control or in_aborted_txn(header, job.aborted):
                continue
            try:
                records = decode_records(checked_batch(header, data))
            except CorruptRecordError as e:
                raise CleanerError(f"offset {header.base_offset}: {e}") from None
            for rec in records:
                if rec.key is not None:
                    offset_map[rec.key] = rec.offset
    return FilterContext(offset_map, job.now, job.delete_retention_ms, job.producer_last_offsets,
                          job.aborted, job.producer_epochs)
