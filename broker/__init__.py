# kio without its hypothesis hooks before any module of this package imports kio
# (protocol/kio_import.py says why): the broker never imports a test framework.
from txbroker.protocol.kio_import import import_kio_without_hypothesis as _hide_hypothesis

_hide_hypothesis()
