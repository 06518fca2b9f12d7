"""Producer-epoch exhaustion in the transaction coordinator (issue 25, item 1).

The counterexamples the stateful model (tests/unit/coordinator/test_txn_state.py::TxnMachine) found
at the boundary, replayed step by step with fixed draws, and the coordinator's rules
there, request by request.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.transaction.state import (
    EndTxnResult,
    InitProducerIdResult,
    PersistRequest,
    TransactionCoordinatorState,
    TxnConfig,
)
from txbroker.storage.producer_state import InvalidProducerEpochError, ProducerStateManager

from tests.unit.coordinator.test_txn_state import (
    BAD_STATE,
    CONCURRENT,
    FENCED,
    MAPPING,
    NONE,
    NOT_AVAILABLE,
    OFFSETS,
    PA,
    SEED_PID,
    Harness,
    TxnMachine,
    entry,
    rec,
)
from tests.unit.coordinator.test_txn_v2 import V2_ADD, V2_END, _header


class FixedData:
    """Stands for hypothesis' ``st.data()`` in a replay: each draw returns the next
    recorded value of its label (the failing run printed them). The crash rules draw
    which partitions hold data, a list of booleans per transactional id; a draw the
    recording does not have (the fixed coordinator took another path than the failing
    one) gets no data held."""

    def __init__(self, draws: Iterable[tuple[str, object]]) -> None:
        self.draws = list(draws)

    def draw(self, strategy, label: str | None = None):
        for i, (want, value) in enumerate(self.draws):
            if want == label:
                del self.draws[i]
                return value
        assert label is not None and label.startswith("data of "), label
        return [False] * len(ast.literal_eval(label.split(" open in ", 1)[1]))


def replay(steps: list[tuple[str, dict]]) -> None:
    """Run ``steps`` (rule name, arguments) on a fresh TxnMachine the way hypothesis
    does: invariants after the initialize rule and after every step, then teardown.
    Inside a (one-example) hypothesis test, so that the machine's ``event()`` calls
    work; no example database."""

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.just(None))
    def run(_) -> None:
        machine = TxnMachine()
        try:
            # A copy per run: hypothesis runs a failing example again to report it.
            for name, kwargs in copy.deepcopy(steps):
                getattr(machine, name)(**kwargs)
                machine.every_token_answered_once_or_held()
                machine.requests_in_flight_match()
                machine.coordinator_state_is_consistent()
        finally:
            machine.teardown()

    run()


def data(*draws: tuple[str, object]) -> FixedData:
    return FixedData(draws)


T0_A0 = "data of t0 open in [('a', 0)]"
T1_A0 = "data of t1 open in [('a', 0)]"


def test_seed_is_near_exhaustion() -> None:
    assert SEED_PID == 777  # the cases below count epochs from the seed's 32764


def test_timeout_at_32766_then_late_v2_abort_then_crash() -> None:
    """The shortest counterexample of issue 25: the v2 producer (client 3) reaches
    epoch 32766, expire_now aborts its transaction (32767), its late EndTxn v5 abort
    used to be answered as a retry with the exhausted epoch 32767; its next transaction
    then wrote data at 32767, and recovery's abort of that data could not bump: a
    PrepareAbort at 32767 whose v2 markers the partition refuses (never completed)."""
    replay([
        ("choose_shell", dict(eager=True, tv2=[False, False, False, True])),
        ("producer_step", dict(action="add", c=1, parts=[("a", 0)], then_pump=True)),
        ("producer_step", dict(action="add", c=3, parts=[("a", 0)], then_pump=True)),
        ("producer_step", dict(action="add", c=3, parts=[("a", 0)], then_pump=False)),
        ("expire_now", dict(which=None)),
        ("producer_step", dict(action="add", c=0, parts=[("a", 0)], then_pump=True)),
        ("producer_step", dict(action="add", c=0, parts=[("a", 0)], then_pump=True)),
        ("producer_step", dict(action="abort", c=3, parts=[("a", 0)], then_pump=False)),
        ("crash", dict(admin=False, data=data((T0_A0, [False])), landed=[], lost=[0, 1])),
        ("expire_now", dict(which=None)),
        ("next_transaction", dict(c=3, commit=True, data=data((T1_A0, [True])),
                                  parts=[("a", 0)], power_failure=9, same=False, write=False)),
        ("producer_step", dict(action="add", c=0, parts=[("a", 0)], then_pump=True)),
    ])




# More counterexamples of the model at the boundary, as hypothesis printed them (fresh
# seeds; not all fully shrunk). In each, a v2 producer is handed 32767 (a late EndTxn
# v5 abort of a transaction the coordinator had aborted at 32767, treated as a retry of
# a bump) and goes on at it: a recovery abort of its data cannot bump (check_orphans),
# markers do not fence it (on_marker_request), its commit would need epoch 32768
# (IllegalTransitionError), its PrepareAbort at 32767 stays (teardown).
MODEL_CASES: dict[str, list[tuple[str, dict]]] = {
    "seed5_1_marker_not_above_owner": [
        ('choose_shell', dict(eager=True, tv2=[False, True, False, False])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t0 open in [('a', 0)]", [False]), ("data of t1 open in [('a', 0)]", [True])), parts=[('a', 0)], power_failure=1, same=False, write=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='abort', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('shell', dict(i=1, kind='markers', marker_ok=[True, True, True], outcome='fail', outcomes=[])),
        ('next_transaction', dict(c=0, commit=False, data=data(("data of t0 open in [('a', 0), ('b', 0)]", [False, True])), parts=[('a', 0), ('b', 0)], power_failure=9, same=False, write=True)),
        ('produce', dict(c=0, parts=[('a', 1), ('__consumer_offsets', 1), ('__consumer_offsets', 0)])),
        ('next_transaction', dict(c=0, commit=False, data=data(("data of t0 open in [('b', 0)]", [True])), parts=[('b', 0), ('a', 1)], power_failure=9, same=False, write=False)),
        ('produce', dict(c=2, parts=[('b', 0)])),
        ('shell', dict(i=5, kind='write', marker_ok=[], outcome='ok', outcomes=['ambiguous', 'ambiguous'])),
        ('shell', dict(i=3, kind='write', marker_ok=[False, True], outcome='ok', outcomes=['ok', 'ambiguous', 'fail'])),
        ('producer_step', dict(action='add', c=0, parts=[('b', 0), ('a', 0)], then_pump=False)),
        ('raw_request', dict(c=3, flag=False, kind='verify', modern=True, parts=[], timeout=1000)),
        ('raw_request', dict(c=0, flag=False, kind='offsets', modern=False, parts=[('a', 0), ('b', 0), ('b', 0)], timeout=6000)),
        ('crash', dict(admin=True, data=data(), landed=[False, False, False, True, True, False], lost=[0, 1])),
        ('producer_step', dict(action='add', c=1, parts=[('b', 0)], then_pump=False)),
        ('next_transaction', dict(c=1, commit=True, data=data(), parts=[('a', 1), ('b', 0)], power_failure=0, same=False, write=False)),
        ('shell', dict(i=2, kind='all', marker_ok=[True], outcome='ambiguous', outcomes=[])),
        ('produce', dict(c=1, parts=[('__consumer_offsets', 0)])),
        ('shell', dict(i=6, kind='write', marker_ok=[True], outcome='ok', outcomes=[])),
        ('raw_request', dict(c=0, flag=False, kind='restart', modern=True, parts=[('b', 0)], timeout=1000)),
        ('raw_request', dict(c=2, flag=False, kind='verify', modern=True, parts=[('a', 0)], timeout=6000)),
        ('clock', dict(ms=25000, tick=True)),
    ],
    "seed5_2_recovery_abort_without_bump": [
        ('choose_shell', dict(eager=True, tv2=[False, True, False, False])),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('produce', dict(c=0, parts=[('a', 0)])),
        ('crash', dict(admin=False, data=data(), landed=[], lost=[0, 9])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0), ('a', 1)], power_failure=0, same=False, write=True)),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t0 open in [('a', 0), ('a', 1)]", [False, False]), ("data of t1 open in [('a', 0), ('a', 1)]", [True, True])), parts=[('a', 0), ('a', 1)], power_failure=9, same=False, write=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('crash', dict(admin=False, data=data(), landed=[], lost=[0, 0])),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='abort', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='commit', c=0, parts=[('b', 0), ('b', 0)], then_pump=True)),
        ('next_transaction', dict(c=0, commit=False, data=data(), parts=[('a', 1)], power_failure=0, same=False, write=True)),
        ('next_transaction', dict(c=2, commit=False, data=data(), parts=[('b', 0)], power_failure=1, same=True, write=True)),
        ('producer_step', dict(action='commit', c=1, parts=[('a', 1), ('a', 1)], then_pump=True)),
        ('producer_step', dict(action='commit', c=1, parts=[('b', 0), ('a', 1)], then_pump=True)),
        ('clock', dict(ms=150, tick=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('b', 0)], power_failure=0, same=True, write=True)),
        ('next_transaction', dict(c=0, commit=True, data=data(("data of t0 open in [('a', 1)]", [False])), parts=[('b', 0)], power_failure=9, same=True, write=False)),
        ('crash', dict(admin=False, data=data(), landed=[], lost=[1, 1])),
        ('crash', dict(admin=False, data=data(), landed=[True, False, True, False, True, True], lost=[9, 0])),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t1 open in [('a', 0), ('a', 1)]", [True, True])), parts=[('a', 1)], power_failure=9, same=True, write=False)),
        ('clock', dict(ms=150, tick=True)),
        ('producer_step', dict(action='commit', c=2, parts=[('b', 0)], then_pump=True)),
    ],
    "seed5_3_recovery_abort_without_bump_teardown": [
        ('choose_shell', dict(eager=True, tv2=[True, True, True, False])),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=True)),
        ('clock', dict(ms=0, tick=True)),
        ('shell', dict(i=0, kind='write', marker_ok=[True, True], outcome='ok', outcomes=['ok'])),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0), ('a', 0)], then_pump=False)),
        ('clock', dict(ms=0, tick=True)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=True, write=False)),
        ('shell', dict(i=0, kind='markers', marker_ok=[True, True], outcome='ok', outcomes=[])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('shell', dict(i=0, kind='write', marker_ok=[True, True, True], outcome='ok', outcomes=['ok'])),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0), ('a', 1)], power_failure=0, same=True, write=True)),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t0 open in [('a', 0), ('a', 1)]", [False, False]), ("data of t1 open in [('a', 0), ('a', 1)]", [True, True])), parts=[('a', 0), ('a', 1)], power_failure=9, same=True, write=False)),
        ('shell', dict(i=0, kind='all', marker_ok=[], outcome='ok', outcomes=['ok'])),
        ('shell', dict(i=0, kind='write', marker_ok=[True, True, True], outcome='ok', outcomes=[])),
        ('crash', dict(admin=False, data=data(("data of t0 open in [('a', 0), ('a', 1)]", [True, False]), ("data of t1 open in [('a', 0), ('a', 1)]", [False, False])), landed=[], lost=[0, 0])),
        ('crash', dict(admin=False, data=data(("data of t0 open in [('a', 0), ('a', 1)]", [False, False]), ("data of t1 open in [('a', 0), ('a', 1)]", [False, False])), landed=[], lost=[0, 0])),
        ('clock', dict(ms=0, tick=True)),
        ('clock', dict(ms=0, tick=True)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=True)),
        ('crash', dict(admin=False, data=data(), landed=[False, False, False, False], lost=[9, 0])),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=True)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='abort', c=1, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('shell', dict(i=5, kind='all', marker_ok=[True, True, True], outcome='ambiguous', outcomes=[])),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('b', 0)], power_failure=0, same=False, write=True)),
        ('crash', dict(admin=False, data=data(("data of t1 open in [('a', 0)]", [True])), landed=[True, True, True, False], lost=[1, 9])),
    ],
    "seed5_4_marker_not_above_owner": [
        ('choose_shell', dict(eager=True, tv2=[False, True, False, False])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t0 open in [('a', 0)]", [False]), ("data of t1 open in [('a', 0)]", [True])), parts=[('a', 0)], power_failure=1, same=False, write=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='abort', c=1, parts=[('a', 0)], then_pump=False)),
        ('shell', dict(i=6, kind='markers', marker_ok=[True, True, True], outcome='ambiguous', outcomes=[])),
        ('raw_request', dict(c=2, flag=False, kind='offsets', modern=False, parts=[], timeout=3000)),
        ('next_transaction', dict(c=2, commit=True, data=data(), parts=[('b', 0), ('b', 0)], power_failure=9, same=False, write=True)),
        ('shell', dict(i=1, kind='markers', marker_ok=[True, False], outcome='ok', outcomes=['ok', 'ok'])),
        ('produce', dict(c=1, parts=[('b', 0)])),
        ('shell', dict(i=0, kind='write', marker_ok=[True, False, False], outcome='fail', outcomes=[])),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0), ('a', 1)], then_pump=True)),
        ('producer_step', dict(action='abort', c=3, parts=[('a', 1)], then_pump=False)),
        ('crash', dict(admin=True, data=data(), landed=[], lost=[9, 1])),
        ('producer_step', dict(action='offsets', c=2, parts=[('b', 0)], then_pump=True)),
    ],
    "seed5_5_end_txn_answer": [
        ('choose_shell', dict(eager=True, tv2=[False, True, False, False])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t0 open in [('a', 0)]", [False]), ("data of t1 open in [('a', 0)]", [True])), parts=[('a', 0)], power_failure=1, same=False, write=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='abort', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('crash', dict(admin=True, data=data(), landed=[], lost=[1, 1])),
        ('clock', dict(ms=3500, tick=False)),
        ('raw_request', dict(c=2, flag=True, kind='verify', modern=False, parts=[('a', 0), ('b', 0)], timeout=6000)),
        ('clock', dict(ms=50, tick=False)),
        ('produce', dict(c=2, parts=[('a', 0), ('b', 0), ('a', 1)])),
        ('clock', dict(ms=1200, tick=True)),
        ('clock', dict(ms=1, tick=True)),
        ('clock', dict(ms=0, tick=True)),
        ('next_transaction', dict(c=1, commit=False, data=data(), parts=[('a', 1)], power_failure=9, same=False, write=True)),
    ],
    "seed5_6_commit_past_short_max": [
        ('choose_shell', dict(eager=True, tv2=[False, True, False, False])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('next_transaction', dict(c=1, commit=True, data=data(("data of t0 open in [('a', 0)]", [False]), ("data of t1 open in [('a', 0)]", [True])), parts=[('a', 0)], power_failure=1, same=False, write=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='abort', c=1, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=1, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
    ],
    # Not a coordinator bug: found once the fix was in. expire_now() while t1's
    # AddPartitionsToTxn write (no partitions) is in flight, again while its abort's
    # PrepareAbort (at 32767) is: that one lands, and the CompleteAbort a transaction
    # without partitions writes at once was taken by the model for the deferred fence.
    "after_fix_expire_now_twice_empty_abort": [
        ('choose_shell', dict(eager=True, tv2=[False, False, False, False])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('shell', dict(i=0, kind='write', marker_ok=[], outcome='ok', outcomes=[])),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=2, parts=[('a', 0)], then_pump=False)),
        ('next_transaction', dict(c=0, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('raw_request', dict(c=1, flag=False, kind='init', modern=False, parts=[], timeout=1000)),
        ('next_transaction', dict(c=2, commit=True, data=data(), parts=[('a', 0)], power_failure=0, same=False, write=False)),
        ('raw_request', dict(c=1, flag=False, kind='add', modern=False, parts=[], timeout=1000)),
        ('expire_now', dict(which=None)),
        ('expire_now', dict(which=None)),
        ('shell', dict(i=0, kind='write', marker_ok=[], outcome='ok', outcomes=[])),
    ],
    # Not at the boundary itself, found by a fresh seed with the fix in: a v1 client's
    # EndTxn (v1) of the Ongoing transaction a v2 client's implicit add opened at the same
    # (777, 32766), which both held after a KIP-360 retry answered without a bump. The
    # PrepareCommit kept version 2: answered with id/epoch, and its markers at the
    # unbumped epoch with v2 rules (which a partition refuses). Both fail before
    # end_txn records version 0 for EndTxn below v5, as Kafka's endTransactionWithTV1.
    "seed19_1_v1_end_txn_of_v2_ongoing": [
        ('choose_shell', dict(eager=True, tv2=[False, False, False, True])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=3, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='commit', c=1, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='commit', c=3, parts=[('a', 0), ('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='commit', c=1, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='commit', c=2, parts=[('a', 0), ('b', 0)], then_pump=True)),
        ('raw_request', dict(c=2, flag=True, kind='init', modern=True, parts=[('a', 1)], timeout=6000)),
        ('producer_step', dict(action='commit', c=0, parts=[('a', 1), ('a', 0)], then_pump=False)),
        ('shell', dict(i=5, kind='markers', marker_ok=[], outcome='ok', outcomes=[])),
        ('producer_step', dict(action='abort', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='abort', c=0, parts=[('a', 1), ('a', 1)], then_pump=False)),
        ('shell', dict(i=4, kind='markers', marker_ok=[], outcome='ok', outcomes=['ok', 'ok', 'ok', 'ok'])),
        ('shell', dict(i=2, kind='all', marker_ok=[True, False, True], outcome='ok', outcomes=[])),
        ('producer_step', dict(action='add', c=3, parts=[('a', 0), ('a', 0)], then_pump=True)),
        ('producer_step', dict(action='commit', c=0, parts=[('a', 0), ('a', 1)], then_pump=False)),
        ('raw_request', dict(c=3, flag=False, kind='end', modern=True, parts=[('a', 1), ('a', 1), ('a', 1)], timeout=1000)),
        ('shell', dict(i=2, kind='write', marker_ok=[False, False, True], outcome='fail', outcomes=['ok', 'ok', 'ok'])),
        ('raw_request', dict(c=3, flag=True, kind='init', modern=False, parts=[('a', 1)], timeout=6000)),
        ('raw_request', dict(c=0, flag=False, kind='restart', modern=True, parts=[('b', 0)], timeout=6000)),
        ('raw_request', dict(c=1, flag=True, kind='end', modern=False, parts=[], timeout=0)),
    ],
    "seed19_2_v1_end_txn_of_v2_ongoing_teardown": [
        ('choose_shell', dict(eager=True, tv2=[False, False, False, True])),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=3, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=1, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='commit', c=1, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=0, parts=[('a', 0)], then_pump=True)),
        ('producer_step', dict(action='commit', c=3, parts=[('a', 0), ('a', 0)], then_pump=False)),
        ('producer_step', dict(action='add', c=3, parts=[('a', 0)], then_pump=False)),
        ('producer_step', dict(action='commit', c=1, parts=[('a', 0)], then_pump=True)),
    ],
    # Neither at the boundary: t0's tombstone (transactional.id.expiration.ms) failed
    # ambiguously (in the log, the id alive in memory); its producer's next add was acted
    # on at append, a power failure took that Ongoing record, and recovery found the
    # producer's data open under a producer id the log no longer knew (an unresolved
    # orphan). Fails before an add after a failed tombstone waits for its fsync.
    "seed26824_add_after_ambiguous_tombstone": [
        ('choose_shell', dict(eager=True, tv2=[False, False, False, False])),
        ('clock', dict(ms=0, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('producer_step', dict(action='add', c=2, parts=[('a', 0)], then_pump=True)),
        ('clock', dict(ms=25000, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('clock', dict(ms=0, tick=False)),
        ('shell', dict(i=0, kind='all', marker_ok=[], outcome='ok', outcomes=['ok', 'ambiguous'])),
        ('producer_step', dict(action='add', c=2, parts=[('a', 0)], then_pump=False)),
        ('crash', dict(admin=False, data=data(("data of t0 open in [('a', 0)]", [True])), landed=[], lost=[1, 0])),
    ],
}


@pytest.mark.parametrize("name", sorted(MODEL_CASES))
def test_model_counterexample(name: str) -> None:
    replay(MODEL_CASES[name])


# ==================================================================================
# The coordinator's rules at the last epoch, request by request. Kafka 4.3.1 ends the
# aborts it starts itself (timeout, fencing InitProducerId) through its transactions v2
# path when transaction.version 2 is finalized (txbroker's default too): one bump, to
# Short.MaxValue (32767) when the producer held 32766, with the next producer id
# allocated in the PrepareAbort record, and CompleteAbort continuing under it at epoch
# 0 (TransactionCoordinator.generateTxnTransitMetadataForTxnCompletion,
# TransactionMetadata.prepareAbortOrCommit / prepareComplete).
# ==================================================================================

LAST = 32766  # the last epoch a producer may hold (isEpochExhausted: >= Short.MaxValue - 1)
MAX = 32767  # Short.MaxValue: the coordinator's, to fence with


def ongoing_at_last_epoch(v: int = V2_ADD, **config: int) -> Harness:
    """Producer 500 at epoch 32766 with a transaction open in PA (added with
    AddPartitionsToTxn v``v``: 5 is a v2 producer's implicit add, 3 a v1 producer's);
    a 100 ms transaction timeout, checked every 10 ms; next producer ids from 900."""
    config.setdefault("abort_timed_out_check_interval_ms", 10)
    h = Harness([entry("t", rec(producer_id=500, producer_epoch=LAST, timeout_ms=100))],
                first_pid=900, **config)
    t = h.add(500, LAST, [PA], v=v)
    h.settle()
    assert h.r(t).error == NONE
    assert (h.state(), h.info()["producer_epoch"]) == ("Ongoing", LAST)
    return h


def assert_rotating_abort(p: PersistRequest, next_pid: int = 900) -> None:
    """The PrepareAbort of an abort the coordinator started at the last epoch."""
    r = p.record
    assert (r.state, r.producer_id, r.producer_epoch) == ("PrepareAbort", 500, MAX), r
    assert (r.next_producer_id, r.last_producer_epoch, r.client_transaction_version) == (
        next_pid, LAST, 2), r


def assert_rotated(h: Harness, next_pid: int = 900) -> None:
    info = h.info()
    assert (info["state"], info["producer_id"], info["producer_epoch"]) == (
        "CompleteAbort", next_pid, 0), info
    assert (info["previous_producer_id"], info["last_producer_epoch"]) == (500, LAST), info
    assert info["next_producer_id"] == -1


@pytest.mark.parametrize("v", [V2_ADD, 3], ids=["v2", "v1"])
def test_timeout_at_the_last_epoch_rotates_the_producer_id(v: int) -> None:
    """Kafka's shouldHandleTimeoutAtEpochOverflowBoundaryCorrectly...TV2: the abort of a
    timed-out transaction at 32766 takes 32767 (the markers carry it, above the data's
    epoch) and allocates the next producer id; CompleteAbort continues under it at 0.
    The same for a v1 producer's transaction: Kafka takes the broker's transaction
    version for the aborts it starts, not the client's."""
    h = ongoing_at_last_epoch(v)
    h.tick(1000)
    [p] = h.writes
    assert_rotating_abort(p)
    h.flush()
    [m] = h.markers
    assert (m.producer_id, m.producer_epoch, m.commit, m.partitions) == (500, MAX, False, (PA,))
    h.settle()
    assert_rotated(h)
    # The rotation survives a reload of the log.
    h.crash()
    assert_rotated(h)


def test_late_v2_abort_after_a_timeout_at_the_last_epoch_gets_the_next_id() -> None:
    """The producer of the timed-out transaction ends it late (EndTxn v5, abort, the
    epoch it held): a retry of an abort that rotated (retryOnOverflow), answered with
    the next producer id at 0, never with 32767; its commit is INVALID_TXN_STATE."""
    h = ongoing_at_last_epoch()
    h.tick(1000)
    h.flush()  # PrepareAbort durable, markers in flight
    assert h.r(h.end(500, LAST, False, v=V2_END)) == EndTxnResult(CONCURRENT)
    h.settle()
    assert h.r(h.end(500, LAST, True, v=V2_END)).error == BAD_STATE
    assert h.r(h.end(500, LAST, False, v=V2_END)) == EndTxnResult(NONE, 900, 0)
    assert_rotated(h)
    # The producer goes on under the next id.
    t = h.add(900, 0, [PA], v=V2_ADD)
    h.settle()
    assert h.r(t).error == NONE
    t = h.end(900, 0, True, v=V2_END)
    h.settle()
    assert h.r(t) == EndTxnResult(NONE, 900, 1)


def test_kip360_init_after_a_timeout_at_the_last_epoch_gets_the_next_id() -> None:
    """Kafka's ...RetryInitProducerIdTV2: InitProducerId with the old id and 32766 (the
    previous id at an exhausted epoch, and the last epoch of the record) is answered with
    the next id at 0, without a bump."""
    h = ongoing_at_last_epoch()
    h.tick(1000)
    h.settle()
    t = h.init(pid=500, epoch=LAST)
    h.settle()
    assert h.r(t) == InitProducerIdResult(NONE, 900, 0)
    # Any other epoch of the old id is fenced; a new instance bumps.
    assert h.r(h.init(pid=500, epoch=LAST - 1)).error == FENCED
    assert h.ready() == (900, 1)


@pytest.mark.parametrize("v", [V2_ADD, 3], ids=["v2", "v1"])
def test_fencing_init_at_the_last_epoch_rotates_the_producer_id(v: int) -> None:
    """Kafka's shouldRotateProducerIdWhenInitPidFencesOngoingTxnAtEpochOverflowBoundaryTV2:
    a new instance's InitProducerId finds the transaction Ongoing at 32766: aborted at
    32767 with the next id allocated, CONCURRENT_TRANSACTIONS; the retry then bumps the
    next id's epoch. The fenced producer's late v2 abort before that gets the next id."""
    h = ongoing_at_last_epoch(v)
    t = h.init()
    [p] = h.writes
    assert_rotating_abort(p)
    h.settle()
    assert h.r(t) == InitProducerIdResult(CONCURRENT)
    assert_rotated(h)
    if v == V2_ADD:
        assert h.r(h.end(500, LAST, False, v=V2_END)) == EndTxnResult(NONE, 900, 0)
    else:
        assert h.r(h.end(500, LAST, False, v=3)).error == MAPPING
    assert h.ready() == (900, 1)
    assert h.r(h.end(500, LAST, False, v=V2_END)).error == MAPPING


def test_expire_now_at_the_last_epoch_rotates_the_producer_id() -> None:
    h = ongoing_at_last_epoch()
    fx = h.absorb(h.sm.expire_now(h.now))
    assert fx.expired == ["t"]
    [p] = h.writes
    assert_rotating_abort(p)
    h.settle()
    assert_rotated(h)


def test_failed_abort_write_at_the_last_epoch_allocates_again_without_a_second_bump() -> None:
    """The PrepareAbort write fails: the fence is in memory (the old producer stays
    fenced, hasFailedEpochFence), and the next check aborts again at 32767 with a
    newly allocated id (Kafka allocates in every attempt)."""
    h = ongoing_at_last_epoch()
    h.tick(1000)
    p = h.persist_one(NOT_AVAILABLE)
    assert_rotating_abort(p, 900)
    info = h.info()
    assert (info["state"], info["producer_epoch"], info["failed_epoch_fence"]) == ("Ongoing", MAX, True)
    assert h.r(h.add(500, LAST, [PA], v=V2_ADD)).error == FENCED
    h.tick(2000)
    [p] = h.writes
    assert_rotating_abort(p, 901)
    h.settle()
    assert_rotated(h, 901)


def test_no_producer_id_for_the_abort_leaves_the_transaction_alone() -> None:
    """The allocator fails (its block cannot be written): a timeout's abort at the last
    epoch changes nothing and is tried again at the next check; a fencing InitProducerId
    is answered COORDINATOR_LOAD_IN_PROGRESS (retriable), as without a producer id
    elsewhere."""
    h = ongoing_at_last_epoch()
    pids = iter([None, None, 900])

    def allocate() -> int:
        pid = next(pids)
        if pid is None:
            raise OSError("no producer id block")
        return pid

    h.sm._allocate_producer_id = allocate
    fx = h.tick(1000)
    assert not fx.persist and not fx.events and fx.wake_at_ms == 1010
    t = h.init()
    assert h.r(t) == InitProducerIdResult(E.coordinator_load_in_progress.value)
    info = h.info()
    assert (info["state"], info["producer_epoch"], info["pending_state"]) == ("Ongoing", LAST, None)
    assert not info["failed_epoch_fence"]
    h.tick(1010)
    [p] = h.writes
    assert_rotating_abort(p)
    h.settle()
    assert_rotated(h)


def test_recovery_abort_of_lost_records_at_the_last_epoch_rotates() -> None:
    """Recovery finds data of producer 500 open in PA that no durable record covers (its
    AddPartitionsToTxn record was lost): aborted as a timeout would, at the last epoch
    with the next producer id."""
    sm = TransactionCoordinatorState(TxnConfig(), iter([900, 901]).__next__, lambda g: (OFFSETS, 0),
                                     txn_first_offset=lambda pid, tp: 7 if (pid, tp) == (500, PA) else None)
    sm.replay(*entry("t", rec(producer_id=500, producer_epoch=LAST, state="CompleteCommit",
                              txn_start_ms=0, client_transaction_version=2)))
    fx = sm.recover(0, {500: {PA: 7}})
    assert fx.expired == ["t"]
    [p] = fx.persist
    assert_rotating_abort(p)
    assert p.record.partitions == {PA} and p.record.txn_first_offsets == {PA: 7}
    fx = sm.persisted(0, p.write_id)
    [m] = fx.markers
    assert (m.producer_id, m.producer_epoch, m.partitions) == (500, MAX, (PA,))
    [c] = sm.markers_written(0, m.marker_id).persist
    assert (c.record.state, c.record.producer_id, c.record.producer_epoch) == ("CompleteAbort", 900, 0)


@pytest.mark.parametrize("state", ["PrepareAbort", "Ongoing"])
def test_abort_at_short_max_value_from_an_old_log_is_marked_with_v1_rules(state: str) -> None:
    """A txbroker before this fix could hand 32767 to a v2 producer, whose data then
    sits at 32767: its abort (recovered from the log, or of its Ongoing transaction)
    cannot bump, and a v2 marker of the open transaction's epoch is refused by the
    partition (KIP-1228), so it would never complete. An ABORT at 32767 goes with v1
    rules (epoch at or above the producer's): no later transaction of the id can be open
    at 32767, so it cannot end the wrong one."""
    r = rec(producer_id=500, producer_epoch=MAX, state=state, partitions=frozenset({PA}),
            txn_start_ms=0, timeout_ms=100, client_transaction_version=2)
    h = Harness([entry("t", r)], first_pid=900, abort_timed_out_check_interval_ms=10)
    if state == "Ongoing":
        h.tick(1000)
        [p] = h.writes
        assert (p.record.producer_epoch, p.record.next_producer_id) == (MAX, 900)
        h.flush()
    [m] = h.markers
    assert (m.producer_id, m.producer_epoch, m.commit, m.transaction_version) == (500, MAX, False, 0)
    # What the partition does with it (producer 500's transaction open at 32767).
    partition = ProducerStateManager("a-0")
    partition.update(_header(500, MAX))
    with pytest.raises(InvalidProducerEpochError):
        partition.check(_header(500, MAX, control=True, offset=1), 0, transaction_version=2)
    assert partition.check(_header(500, MAX, control=True, offset=1), 0,
                           transaction_version=m.transaction_version) is None
    h.settle()
    assert h.state() == "CompleteAbort"


def test_commit_markers_at_short_max_value_keep_their_version() -> None:
    """A v2 commit at 32766 takes 32767 for its markers as transactions v2 (above the
    data's 32766); only aborts at Short.MaxValue change the rules."""
    h = ongoing_at_last_epoch()
    h.end(500, LAST, True, v=V2_END)
    h.flush()
    [m] = h.markers
    assert (m.producer_epoch, m.commit, m.transaction_version) == (MAX, True, 2)
