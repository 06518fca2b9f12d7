"""The linear-time topic regex engine (coordinator/group/topic_regex.py): it agrees with
Python's ``re.fullmatch`` on the RE2 syntax both accept, refuses what RE2 refuses, and a
pattern that makes a backtracking engine take exponential time costs it one pass."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.coordinator.group.topic_regex import MAX_STATES, RegexError, TopicRegex

ALPHABET = "ab.-1"
atoms = st.sampled_from(["a", "b", ".", r"\.", "-", "1", "[ab]", "[^a]", r"\d", "[a-b1]",
                         r"\w"])


def _pattern(depth: int):
    if depth == 0:
        return atoms
    inner = _pattern(depth - 1)
    return st.one_of(
        atoms,
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}|{t[1]}"),
        inner.map(lambda p: f"({p})"),
        inner.map(lambda p: f"(?:{p})*"),
        inner.map(lambda p: f"({p})+"),
        inner.map(lambda p: f"({p})?"),
        inner.map(lambda p: f"({p}){{1,2}}"),
        inner.map(lambda p: f"^{p}$"),
    )


@settings(max_examples=300, deadline=None)
@given(pattern=_pattern(3), names=st.lists(st.text(ALPHABET, max_size=8), max_size=8))
def test_agrees_with_python_re(pattern, names):
    ours, theirs = TopicRegex(pattern), re.compile(pattern)
    for name in names:
        assert ours.matches(name) == bool(theirs.fullmatch(name)), (pattern, name)


def test_whole_name_and_flags():
    assert TopicRegex("orders-.*").matches("orders-eu")
    assert not TopicRegex("orders").matches("orders-eu")  # a full match, as RE2/J's
    assert TopicRegex("(?i)Orders-[a-z]+").matches("ORDERS-EU")
    assert TopicRegex(r"\Qa.b\E").matches("a.b") and not TopicRegex(r"\Qa.b\E").matches("axb")
    assert TopicRegex("(?P<x>a)(?<y>b)").matches("ab")


@pytest.mark.parametrize("pattern", ["(", "a**", "(?=a)", "(?!a)", "(?<=a)b", r"\1",
                                     "[a", "a{2,1}", "a{1001}", "*a", "a++", r"\y"])
def test_refuses_what_re2_refuses(pattern):
    with pytest.raises(RegexError):
        TopicRegex(pattern)


def test_pattern_size_is_bounded():
    with pytest.raises(RegexError, match="too large"):
        TopicRegex("((a{100}){100}){100}")
    assert len(TopicRegex("(a{100}){10}")._kind) < MAX_STATES


def test_backtracking_traps_cost_one_pass():
    # re.fullmatch("(a+)+b", "a" * 40) would take about 2^40 steps.
    assert not TopicRegex("(a+)+b").matches("a" * 20_000)
    assert not TopicRegex("(a|aa)*c").matches("a" * 20_000)
    assert TopicRegex("(a|aa)*c").matches("a" * 20_000 + "c")
