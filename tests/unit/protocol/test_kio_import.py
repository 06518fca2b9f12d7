"""The broker never imports a test framework: in an environment where hypothesis is
installed (this one), importing the server (and so kio's schema types) leaves
hypothesis, pytest and trio unimported (protocol/kio_import.py)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import txbroker.broker.server, txbroker.broker.main, txbroker.coordinator.shell
import kio.schema.produce.v9.request
loaded = [m for m in ("hypothesis", "pytest", "trio") if m in sys.modules]
assert not loaded, loaded
"""


def test_hypothesis_is_installed_here():
    import hypothesis  # noqa: F401  (else the test below proves nothing)


def test_the_broker_imports_no_test_framework():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_session_that_imported_hypothesis_keeps_kios_strategies():
    # tests/unit/protocol/test_bounds.py draws kio types with st.from_type: hypothesis
    # imported first, kio registers its strategies as before.
    check = ("import hypothesis.strategies, sys, txbroker.broker.server\n"
             "from kio.static.primitive import i16\n"
             "from hypothesis.strategies import from_type\n"
             "v = from_type(i16).example()\n"
             "assert -2**15 <= v < 2**15, v\n")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
