"""The pytest side of testing/thread_safe_ast.py: txbroker's own modules are not
assertion-rewritten in a test session (the broker's thread imports them lazily, and a
rewrite there raced with the test thread on CPython 3.11.7), and pytest's rewrite step
runs under the parse lock."""

import sys

import pytest
from txbroker.testing.thread_safe_ast import affected

pytestmark = pytest.mark.skipif(not affected(sys.version_info),
                                reason="this CPython has the fix")


def _hook():
    [hook] = [f for f in sys.meta_path if type(f).__name__ == "AssertionRewritingHook"]
    return hook


def test_product_packages_are_not_marked_for_rewriting():
    marked = _hook()._must_rewrite
    assert "txbroker" not in marked and "broker" not in marked, marked


def test_a_lazily_imported_handler_is_not_rewritten():
    import importlib

    module = importlib.import_module("txbroker.broker.handlers.delete_records")
    assert type(module.__loader__).__name__ != "AssertionRewritingHook"


def test_pytest_rewrite_runs_under_the_lock():
    from _pytest.assertion import rewrite

    assert getattr(rewrite._rewrite_test, "_txbroker_serialized", False)
