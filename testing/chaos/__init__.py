"""Chaos testing of consume-transform-produce pipelines: the checker (checker.py, pure)
and what it reads from a broker (history.py)."""

from txbroker.protocol.kio_import import import_kio_without_hypothesis as _hide_hypothesis

_hide_hypothesis()  # before history.py imports kio (protocol/kio_import.py)
