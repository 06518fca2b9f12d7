"""txbroker: a pure-Python asyncio broker speaking the Kafka wire protocol.

The repository keeps its layers as top-level folders (``protocol/``, ``storage/``,
``coordinator/``, ``broker/``, ``tools/``, ``testing/``, ``spark_jobs/``); installed,
they live under this one namespace (``txbroker.protocol``, ``txbroker.storage``, ...)
so that they never collide with an application's own ``storage`` or ``broker``
package. This package itself is the ``txbroker`` command (cli.py); docs/internals.md
describes the layout.
"""

import os as _os


def __getattr__(name: str) -> str:
    # Looked up on use: importlib.metadata costs ~25 ms, and the broker's start-up
    # (txbroker serve) never needs the version.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("txbroker")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version

# In a source checkout the layers are this folder's siblings: import them from this
# checkout even when another one is installed in editable mode (worktrees, a clean
# clone before `make install`). An installed wheel has them inside this folder.
_checkout = _os.path.dirname(_os.path.abspath(__path__[0]))
if _os.path.isfile(_os.path.join(_checkout, "pyproject.toml")) and \
        _os.path.isdir(_os.path.join(_checkout, "broker")):
    __path__.append(_checkout)
