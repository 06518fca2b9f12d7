"""One ``ast.parse`` at a time in a process that runs an in-process broker.

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion depth in
interpreter-wide state, so two threads inside ``ast.parse`` at once can fail with
"SystemError: AST constructor recursion depth mismatch" when the collector lets the other
thread run (python/cpython#106905; fixed in 3.11.8 and 3.12.2). This project's CI runs
3.11.7. A test
process parses more than one expects: pytest's assertion rewriting parses every module
it imports for the first time (in an editable checkout that includes the broker's own
lazily imported handlers, imported on the broker's thread), and Python 3.11's tracebacks
parse the failing line. CI failed on exactly that: a DeleteRecords handler imported on
the broker thread while the test thread parsed. Serializing the parse costs nothing
measurable (parses are rare and short) and removes the race for every caller that goes
through ``ast.parse``.

``ast.parse`` is not the only way in: compiling an AST object walks the same counter,
and pytest's assertion rewriting parses *and* compiles. CI failed once more with the
parse lock alone (the broker thread parsing a rewritten handler while pytest compiled a
rewritten module), so the pytest plugin also (1) runs pytest's whole rewrite step under
the same lock and (2) keeps txbroker's own modules out of assertion rewriting: an
editable or installed txbroker is marked for rewriting as a pytest11 plugin's package,
so every module the broker thread imports lazily was parsed and compiled there.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading

_lock = threading.RLock()
# What the product's top-level packages are called, installed (txbroker.*) and in a
# checkout (broker, storage, ... when an egg-info next to them names them).
_PRODUCT_PACKAGES = ("txbroker", "broker", "storage", "coordinator", "protocol", "tools",
                     "testing", "spark_jobs")


def affected(version: tuple) -> bool:
    """Whether this CPython has the race (before the fix of python/cpython#113035)."""
    return version[:3] < (3, 11, 8) or ((3, 12) <= version[:2] and version[:3] < (3, 12, 2))


def serialize_ast_parse() -> None:
    """Wrap ``ast.parse`` in a process-wide lock (idempotent)."""
    if not affected(sys.version_info) or getattr(ast.parse, "_txbroker_serialized", False):
        return
    ast.parse = _locked(ast.parse)


def _locked(original):
    """``original`` run under the process-wide lock (marked, so it is wrapped once)."""
    @functools.wraps(original)
    def call(*args, **kwargs):
        with _lock:
            return original(*args, **kwargs)

    call._txbroker_serialized = True  # type: ignore[attr-defined]
    return call


def serialize_pytest_rewrite(config) -> None:
    """Under pytest: the rewrite step (parse, rewrite, compile) under the parse lock, and
    this project's modules not rewritten (they are not tests; the broker's thread
    imports them lazily). Both reach into pytest internals, so each is skipped when the
    attribute is not there (the rest of the guard still holds)."""
    if not affected(sys.version_info):
        return
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return
    original = getattr(rewrite, "_rewrite_test", None)
    if original is not None and not getattr(original, "_txbroker_serialized", False):
        rewrite._rewrite_test = _locked(original)
    hook = None
    for finder in sys.meta_path:
        if type(finder).__name__ == "AssertionRewritingHook":
            hook = finder
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set):
        root = _product_root()
        for name in list(marked):
            if name in _PRODUCT_PACKAGES and _is_ours(name, root):
                marked.discard(name)


def _product_root() -> str:
    import os

    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_ours(name: str, root: str) -> bool:
    """Whether the top-level package ``name`` is this project's (not a user's own
    ``testing`` package, say)."""
    import importlib.util
    import os

    if name == "txbroker":
        return True
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    paths = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(os.path.abspath(p).startswith(root + os.sep) for p in paths)
