"""Moved to ``txbroker.testing.pytest_plugin`` (the ``txbroker`` entry point loads it);
kept for suites that name the old module, e.g. ``-p txbroker.broker.pytest_plugin``
with PYTEST_DISABLE_PLUGIN_AUTOLOAD set. (An alias: tests/unit/test_layers.py allows
it this one import against the layers, and no product module may import it.)"""

from txbroker.testing.pytest_plugin import (
    FIXTURE_DEFAULTS,
    txbroker,
    txbroker_config,
    txbroker_security,
)

__all__ = ["FIXTURE_DEFAULTS", "txbroker", "txbroker_config", "txbroker_security"]
