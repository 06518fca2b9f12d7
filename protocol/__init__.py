"""Bytes <-> typed Kafka messages (sans-IO)."""

# kio without its hypothesis hooks before any module here imports kio (kio_import.py).
from .kio_import import import_kio_without_hypothesis as _hide_hypothesis

_hide_hypothesis()
