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
"""

from __future__ import annotations

import ast
import functools
import sys
import threading

_lock = threading.RLock()


def affected(version: tuple) -> bool:
    """Whether this CPython has the race (before the fix of python/cpython#113035)."""
    return version[:3] < (3, 11, 8) or ((3, 12) <= version[:2] and version[:3] < (3, 12, 2))


def serialize_ast_parse() -> None:
    """Wrap ``ast.parse`` in a process-wide lock (idempotent)."""
    if not affected(sys.version_info) or getattr(ast.parse, "_txbroker_serialized", False):
        return
    original = ast.parse

    @functools.wraps(original)
    def parse(*args, **kwargs):
        with _lock:
            return original(*args, **kwargs)

    parse._txbroker_serialized = True  # type: ignore[attr-defined]
    ast.parse = parse
