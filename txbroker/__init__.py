"""txbroker: a pure-Python asyncio broker speaking the Kafka wire protocol.

The repository keeps its layers as top-level folders (``protocol/``, ``storage/``,
``coordinator/``, ``broker/``, ``spark_jobs/``); installed, they live under this one
namespace (``txbroker.protocol``, ``txbroker.storage``, ...) so that they never collide
with an application's own ``storage`` or ``broker`` package.
"""

import os as _os
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("txbroker")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# In a source checkout the layers are this folder's siblings: import them from this
# checkout even when another one is installed in editable mode (worktrees, a clean
# clone before `make install`). An installed wheel has them inside this folder.
_checkout = _os.path.dirname(_os.path.abspath(__path__[0]))
if _os.path.isfile(_os.path.join(_checkout, "pyproject.toml")) and \
        _os.path.isdir(_os.path.join(_checkout, "broker")):
    __path__.append(_checkout)
