"""CI failed once on CPython 3.11.7's threaded ``ast.parse`` race (testing/thread_safe_ast.py):
the broker thread imported a handler (which pytest's assertion rewriting parses) while
another thread parsed. This drives the race hard: two threads parse while a third makes
cyclic garbage with finalizers, so the collector hands the GIL over in the middle of a
parse. Unguarded, it failed 6 runs out of 6 on this project's Python (3.11.7)."""

import subprocess
import sys
import textwrap

import pytest
from txbroker.testing.thread_safe_ast import affected

RACE = textwrap.dedent("""
    import ast, gc, sys, threading, time
    import txbroker.testing.broker_thread  # importing the in-process broker installs the guard
    gc.set_threshold(50)
    sys.setswitchinterval(1e-5)
    src = open(ast.__file__).read()
    errors = []
    stop = False

    class Finalized:
        def __del__(self):
            sum(range(100))

    def churn():
        while not stop:
            a = Finalized(); b = Finalized(); a.other = b; b.other = a
            del a, b
            time.sleep(0)

    def parse():
        for _ in range(40):
            try:
                ast.parse(src)
            except SystemError as e:
                errors.append(repr(e))
                return

    churner = threading.Thread(target=churn); churner.start()
    parsers = [threading.Thread(target=parse) for _ in range(2)]
    [t.start() for t in parsers]; [t.join() for t in parsers]
    stop = True; churner.join()
    print(errors)
""")


@pytest.mark.skipif(not affected(sys.version_info), reason="this CPython has the fix")
def test_parses_on_two_threads_do_not_corrupt_each_other():
    run = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_affected_versions():
    assert affected((3, 11, 7, "final", 0))
    assert not affected((3, 11, 8, "final", 0))
    assert affected((3, 12, 1, "final", 0))
    assert not affected((3, 12, 2, "final", 0))
    assert not affected((3, 13, 0, "final", 0))
