"""Importing kio without its test-data hooks.

kio registers hypothesis strategies for its types whenever hypothesis can be
imported: about 0.25 s for every process that loads the protocol schemas in a
development or test environment (an installation without the test extra never
pays it). A broker, or a Spark Python worker of the ``txbroker`` source, never
generates test data."""

from __future__ import annotations

import sys


def import_kio_without_hypothesis() -> None:
    """Import kio's base modules with hypothesis hidden, then un-hide it, so that code
    that imports hypothesis later in this process still gets it. A no-op once kio (or
    hypothesis) is imported."""
    if "kio.static" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        import kio.schema.errors  # noqa: F401  (imports kio.static and its primitives)
    finally:
        if sys.modules.get("hypothesis", 0) is None:
            del sys.modules["hypothesis"]
