"""Committed offsets: plain and transactional commits, deletion, expiry, replay from the log."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from txbroker.coordinator.group.offsets import ExpiryRule, OffsetStore
from txbroker.coordinator.group.records import (
    GroupMetadataValue,
    OffsetKey,
    OffsetValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_key,
    encode_offset_value,
)


def test_commit_and_get():
    s = OffsetStore()
    assert s.get("g", "t", 0) is None
    assert s.commit("g", "t", 0, 42, 3, "meta", 1000) == OffsetKey("g", "t", 0)
    assert s.get("g", "t", 0) == OffsetValue(42, 3, "meta", 1000, None)
    s.commit("g", "t", 0, 43, None, "", 2000, expire_ms=5000)
    assert s.get("g", "t", 0) == OffsetValue(43, None, "", 2000, 5000)
    s.commit("g", "t", 1, 7, None, "", 2000)
    assert s.group_offsets("g") == {("t", 0): s.get("g", "t", 0), ("t", 1): s.get("g", "t", 1)}
    assert s.groups() == ["g"] and s.has_offsets("g") and not s.has_offsets("h")


def test_transactional_offsets_are_invisible_until_commit():
    s = OffsetStore()
    s.commit("g", "t", 0, 10, None, "", 1)
    s.txn_commit(7, "g", "t", 0, 20, None, "", 2)
    s.txn_commit(7, "g", "t", 1, 5, None, "", 2)
    assert s.get("g", "t", 0).offset == 10 and s.get("g", "t", 1) is None
    assert s.has_pending("g", "t", 0) and s.has_pending("g", "t", 1) and not s.has_pending("g", "t", 2)
    assert s.pending_producers("g") == {7}
    applied = s.complete_transaction(7, "g", commit=True)
    assert sorted(applied) == [OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)]
    assert s.get("g", "t", 0).offset == 20 and s.get("g", "t", 1).offset == 5
    assert not s.has_pending("g", "t", 0) and s.pending_producers("g") == set()


def test_aborted_transaction_drops_its_offsets():
    s = OffsetStore()
    s.txn_commit(7, "g", "t", 0, 20, None, "", 2)
    assert s.has_offsets("g")  # pending offsets keep the group alive
    assert s.complete_transaction(7, "g", commit=False) == []
    assert s.get("g", "t", 0) is None and not s.has_offsets("g") and s.groups() == []


def test_later_plain_commit_wins_over_earlier_transactional_one():
    s = OffsetStore()
    s.txn_commit(7, "g", "t", 0, 20, None, "", 1)
    s.commit("g", "t", 0, 30, None, "", 2)  # appended after the transactional record
    assert s.complete_transaction(7, "g", commit=True) == []
    assert s.get("g", "t", 0).offset == 30
    # ... and a transactional commit appended after a plain one wins
    s.commit("g", "t", 1, 1, None, "", 3)
    s.txn_commit(8, "g", "t", 1, 2, None, "", 4)
    s.complete_transaction(8, "g", commit=True)
    assert s.get("g", "t", 1).offset == 2


def test_completion_per_group_or_everywhere():
    s = OffsetStore()
    s.txn_commit(7, "a", "t", 0, 1, None, "", 1)
    s.txn_commit(7, "b", "t", 0, 2, None, "", 1)
    s.txn_commit(8, "a", "t", 1, 3, None, "", 1)
    s.complete_transaction(7, "a", commit=True)
    assert s.get("a", "t", 0).offset == 1 and s.has_pending("b", "t", 0)
    s.complete_transaction(7, None, commit=True)  # a marker: every group of producer 7
    assert s.get("b", "t", 0).offset == 2
    assert s.has_pending("a", "t", 1) and s.pending_producers("a") == {8}
    assert s.complete_transaction(99, None, commit=True) == []


def test_delete_partitions_and_groups():
    s = OffsetStore()
    s.commit("g", "t", 0, 1, None, "", 1)
    s.commit("g", "t", 1, 1, None, "", 1)
    s.txn_commit(7, "g", "t", 1, 5, None, "", 1)
    s.txn_commit(7, "g", "u", 0, 5, None, "", 1)
    assert s.delete("g", [("t", 1), ("t", 9)]) == [OffsetKey("g", "t", 1)]
    assert not s.has_pending("g", "t", 1) and s.has_pending("g", "u", 0)
    s.complete_transaction(7, "g", commit=True)
    assert s.get("g", "t", 1) is None and s.get("g", "u", 0).offset == 5
    s.txn_commit(8, "g", "v", 0, 5, None, "", 1)
    assert s.delete_group("g") == [OffsetKey("g", "t", 0), OffsetKey("g", "u", 0)]
    assert not s.has_offsets("g") and s.pending_producers("g") == set()
    assert s.complete_transaction(8, "g", commit=True) == []


def test_expiry_rules():
    day = 86_400_000
    s = OffsetStore()
    s.commit("simple", "t", 0, 1, None, "", 0)
    s.commit("simple", "t", 1, 1, None, "", 5 * day)
    s.commit("old-api", "t", 0, 1, None, "", 0, expire_ms=2 * day)
    s.commit("empty", "t", 0, 1, None, "", 0)
    s.commit("active", "t", 0, 1, None, "", 0)
    s.commit("active", "gone", 0, 1, None, "", 0)
    s.commit("active", "gone", 1, 1, None, "", 0)
    s.txn_commit(7, "active", "gone", 1, 9, None, "", 0)
    s.commit("rebalancing", "t", 0, 1, None, "", 0)
    rules = {
        "simple": ExpiryRule(),  # from each commit
        "old-api": ExpiryRule(base_ms=10 * day),  # explicit expire timestamp wins
        "empty": ExpiryRule(base_ms=6 * day),  # became Empty at day 6
        "active": ExpiryRule(keep_topics=frozenset({"t"})),
        "rebalancing": None,
    }
    removed = s.expire(7 * day, 7 * day, rules.get)
    assert sorted(removed) == [OffsetKey("active", "gone", 0), OffsetKey("old-api", "t", 0),
                               OffsetKey("simple", "t", 0)]
    assert s.get("active", "gone", 1) is not None  # a pending transactional commit protects it
    assert s.get("simple", "t", 1) is not None
    assert sorted(s.expire(13 * day, 7 * day, rules.get)) == [OffsetKey("empty", "t", 0),
                                                              OffsetKey("simple", "t", 1)]
    # True / False from a plain "is the group empty" callable
    assert s.expire(100 * day, 7 * day, lambda g: g == "rebalancing") == [OffsetKey("rebalancing", "t", 0)]
    assert s.get("active", "t", 0) is not None


def test_replay_rebuilds_committed_and_pending_offsets():
    log = [
        (encode_offset_key("g", "t", 0), encode_offset_value(OffsetValue(1, None, "", 1, None)), None),
        (encode_group_metadata_key("g"), encode_group_metadata_value(
            GroupMetadataValue("consumer", 1, None, None, 1)), None),
        (encode_offset_key("g", "t", 0), encode_offset_value(OffsetValue(2, 5, "m", 2, None)), None),
        (encode_offset_key("g", "t", 1), encode_offset_value(OffsetValue(3, None, "", 3, None)), 7),
        (encode_offset_key("g", "t", 2), encode_offset_value(OffsetValue(4, None, "", 3, None)), 8),
        (encode_offset_key("g", "t", 3), encode_offset_value(OffsetValue(4, None, "", 3, None)), None),
        (encode_offset_key("g", "t", 3), None, None),
    ]
    s = OffsetStore()
    results = [s.replay(k, v, pid) for k, v, pid in log]
    assert results[1] is None  # group metadata records are not offsets
    assert s.get("g", "t", 0) == OffsetValue(2, 5, "m", 2, None)
    assert s.get("g", "t", 1) is None and s.has_pending("g", "t", 1)
    assert s.get("g", "t", 3) is None
    s.complete_transaction(7, None, commit=True)  # COMMIT marker of producer 7
    s.complete_transaction(8, None, commit=False)  # ABORT marker of producer 8
    assert s.get("g", "t", 1).offset == 3 and s.get("g", "t", 2) is None
    assert not s.has_offsets("h")


# ---------------------------------------------------------------------------------------------
# Property test: the store agrees with a simple model and with a replay of its own log
# ---------------------------------------------------------------------------------------------

GROUPS = ["a", "b"]
TOPICS = ["t", "u"]
PIDS = [1, 2]
group_st = st.sampled_from(GROUPS)
tp_st = st.tuples(st.sampled_from(TOPICS), st.integers(0, 1))
rule_st = st.sampled_from(["none", "true", "commit", "state", "keep"])


class OffsetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = OffsetStore()
        self.log: list[tuple] = []  # what the shell would have appended, in order
        self.now = 0
        self.seq = 0
        self.committed: dict[tuple[str, str, int], tuple[OffsetValue, int]] = {}
        self.pending: dict[int, dict[tuple[str, str, int], tuple[OffsetValue, int]]] = {}

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _has_pending(self, key) -> bool:
        return any(key in p for p in self.pending.values())

    @rule(group=group_st, tp=tp_st, offset=st.integers(0, 100), expire=st.booleans())
    def commit(self, group, tp, offset, expire):
        expire_ms = self.now + 5000 if expire else None
        self.store.commit(group, *tp, offset, None, "m", self.now, expire_ms)
        value = OffsetValue(offset, None, "m", self.now, expire_ms)
        self.log.append((encode_offset_key(group, *tp), encode_offset_value(value), None))
        self.committed[(group, *tp)] = (value, self._next())

    @rule(pid=st.sampled_from(PIDS), group=group_st, tp=tp_st, offset=st.integers(0, 100))
    def txn_commit(self, pid, group, tp, offset):
        self.store.txn_commit(pid, group, *tp, offset, 1, "x", self.now)
        value = OffsetValue(offset, 1, "x", self.now, None)
        self.log.append((encode_offset_key(group, *tp), encode_offset_value(value), pid))
        self.pending.setdefault(pid, {})[(group, *tp)] = (value, self._next())

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid, commit):
        self.store.complete_transaction(pid, None, commit)
        self.log.append(("marker", pid, commit))
        for key, (value, seq) in self.pending.pop(pid, {}).items():
            current = self.committed.get(key)
            if commit and (current is None or current[1] < seq):
                self.committed[key] = (value, seq)

    @rule(group=group_st, tps=st.lists(tp_st, max_size=3))
    def delete(self, group, tps):
        # (the log cannot express dropping pending offsets: delete settled partitions only)
        tps = [tp for tp in tps if not self._has_pending((group, *tp))]
        removed = self.store.delete(group, tps)
        expected = sorted({OffsetKey(group, *tp) for tp in tps if (group, *tp) in self.committed})
        assert removed == expected
        for k in removed:
            del self.committed[(k.group_id, k.topic, k.partition)]
            self.log.append((encode_offset_key(k.group_id, k.topic, k.partition), None, None))

    @rule(ms=st.sampled_from([1000, 4000, 10000]))
    def tick(self, ms):
        self.now += ms

    @rule(rules=st.fixed_dictionaries({g: rule_st for g in GROUPS}), retention=st.sampled_from([3000, 8000]))
    def expire(self, rules, retention):
        def to_rule(name):
            return {"none": None, "true": True, "commit": ExpiryRule(),
                    "state": ExpiryRule(base_ms=self.now - 2000), "keep": ExpiryRule(keep_topics=frozenset({"t"}))}[name]

        removed = self.store.expire(self.now, retention, lambda g: to_rule(rules[g]))
        expected = []
        for (g, t, p), (v, _) in self.committed.items():
            r = to_rule(rules[g])
            if r is True:
                r = ExpiryRule()
            if r is None or t in r.keep_topics or self._has_pending((g, t, p)):
                continue
            if v.expire_timestamp_ms is not None:
                gone = self.now >= v.expire_timestamp_ms
            else:
                gone = self.now - (r.base_ms if r.base_ms is not None else v.commit_timestamp_ms) >= retention
            if gone:
                expected.append(OffsetKey(g, t, p))
        assert sorted(removed) == sorted(expected)
        for k in removed:
            del self.committed[(k.group_id, k.topic, k.partition)]
            self.log.append((encode_offset_key(k.group_id, k.topic, k.partition), None, None))

    @precondition(lambda self: self.log)
    @invariant()
    def agrees_with_model_and_replay(self):
        replayed = OffsetStore()
        for entry in self.log:
            if entry[0] == "marker":
                replayed.complete_transaction(entry[1], None, entry[2])
            else:
                replayed.replay(*entry)
        for store in (self.store, replayed):
            for g in GROUPS:
                visible = {(g, t, p): v for (t, p), v in store.group_offsets(g).items()}
                assert visible == {k: v for k, (v, _) in self.committed.items() if k[0] == g}
                for t in TOPICS:
                    for p in (0, 1):
                        assert store.has_pending(g, t, p) == self._has_pending((g, t, p))
                for pid in PIDS:
                    assert {(g, *tp): v for tp, v in store.pending_offsets(pid, g).items()} == {
                        k: v for k, (v, _) in self.pending.get(pid, {}).items() if k[0] == g}
                assert store.has_offsets(g) == (
                    any(k[0] == g for k in self.committed) or any(
                        k[0] == g for p in self.pending.values() for k in p))


OffsetMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestOffsetMachine = OffsetMachine.TestCase
