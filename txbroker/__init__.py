"""txbroker: a pure-Python asyncio broker speaking the Kafka wire protocol.

The repository keeps its layers as top-level folders (``protocol/``, ``storage/``,
``coordinator/``, ``broker/``, ``spark_jobs/``); installed, they live under this one
namespace (``txbroker.protocol``, ``txbroker.storage``, ...) so that they never collide
with an application's own ``storage`` or ``broker`` package.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("txbroker")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
