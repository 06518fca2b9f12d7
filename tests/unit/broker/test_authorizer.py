"""The authorizer's rules (broker/security/authorizer.py): example tests of each Kafka rule, and
a stateful test of add/remove/authorize against a naive reading of the rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from txbroker.broker.security.acl_store import load_acls, write_acls
from txbroker.broker.security.authorizer import Authorizer
from txbroker.protocol.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Op, R, P = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str = "orders", op: AclOperation = Op.READ, perm=ALLOW, principal=ALICE,
        host="*", pattern=P.LITERAL, rtype=R.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def check(authz: Authorizer, op=Op.READ, name="orders", principal=ALICE, host=HOST,
          rtype=R.TOPIC) -> bool:
    return authz.authorize(principal, host, op, rtype, name)


# --- one example per rule -------------------------------------------------------------

def test_no_acl_denies_by_default_and_allows_with_allow_everyone():
    assert not check(Authorizer())
    assert check(Authorizer(allow_if_no_acl=True))


def test_allow_everyone_applies_only_where_no_acl_matches_the_resource():
    authz = Authorizer(allow_if_no_acl=True, acls=[acl(principal=BOB)])
    assert not check(authz)  # an ACL on the resource, none for alice: deny
    assert check(authz, name="other")  # no ACL on "other": allowed


def test_literal_allow_exact_name_only():
    authz = Authorizer(acls=[acl()])
    assert check(authz)
    assert not check(authz, name="orders2")
    assert not check(authz, op=Op.WRITE)
    assert not check(authz, principal=BOB)


def test_wildcard_name_principal_and_host():
    authz = Authorizer(acls=[acl(name="*", principal="User:*", host="*")])
    assert check(authz, name="anything", principal=BOB)
    assert not check(authz, rtype=R.GROUP, name="anything")


def test_host_must_match_exactly():
    authz = Authorizer(acls=[acl(host=HOST)])
    assert check(authz, host=HOST)
    assert not check(authz, host="10.0.0.2")


def test_prefixed():
    authz = Authorizer(acls=[acl(name="pay", pattern=P.PREFIXED)])
    assert check(authz, name="payments")
    assert check(authz, name="pay")
    assert not check(authz, name="pa")
    assert not check(authz, name="xpayments")


def test_deny_wins_over_allow():
    authz = Authorizer(acls=[acl(name="*", op=Op.ALL), acl(perm=DENY)])
    assert not check(authz)
    assert check(authz, op=Op.WRITE)
    assert check(authz, name="other")


def test_prefixed_deny_wins_over_literal_allow():
    authz = Authorizer(acls=[acl(), acl(name="ord", pattern=P.PREFIXED, perm=DENY)])
    assert not check(authz)


def test_implied_describe_and_describe_configs():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert check(Authorizer(acls=[acl(op=op)]), op=Op.DESCRIBE), op
    assert not check(Authorizer(acls=[acl(op=Op.CREATE)]), op=Op.DESCRIBE)
    assert check(Authorizer(acls=[acl(op=Op.ALTER_CONFIGS)]), op=Op.DESCRIBE_CONFIGS)
    assert not check(Authorizer(acls=[acl(op=Op.ALTER)]), op=Op.DESCRIBE_CONFIGS)
    # Implication is for ALLOW only: DENY READ does not deny DESCRIBE.
    authz = Authorizer(acls=[acl(op=Op.DESCRIBE), acl(op=Op.READ, perm=DENY)])
    assert check(authz, op=Op.DESCRIBE)


def test_all_allows_and_denies_every_operation():
    assert check(Authorizer(acls=[acl(op=Op.ALL)]), op=Op.ALTER_CONFIGS)
    authz = Authorizer(acls=[acl(op=Op.READ), acl(op=Op.ALL, perm=DENY)])
    assert not check(authz)


def test_super_users_bypass_everything():
    authz = Authorizer(super_users=[BOB], acls=[acl(principal=BOB, perm=DENY, op=Op.ALL)])
    assert check(authz, principal=BOB, op=Op.CLUSTER_ACTION, rtype=R.CLUSTER,
                 name=CLUSTER_NAME)
    assert check(authz, principal=BOB)


def test_decisions_follow_changes():
    authz = Authorizer()
    binding = acl()
    assert not check(authz)
    assert authz.add(binding) and not authz.add(binding)
    assert check(authz)
    assert authz.remove(binding) and not authz.remove(binding)
    assert not check(authz)


def test_authorized_operations_bits():
    authz = Authorizer(acls=[acl(op=Op.WRITE)])
    bits = authz.authorized_operations(ALICE, HOST, R.TOPIC, "orders")
    assert bits == (1 << Op.WRITE) | (1 << Op.DESCRIBE)


def test_authorize_by_resource_type():
    """InitProducerId without a transactional id: WRITE on any topic will do."""
    assert not Authorizer().authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    authz = Authorizer(acls=[acl(op=Op.WRITE, name="t", pattern=P.PREFIXED)])
    assert authz.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    authz.add(acl(op=Op.WRITE, name="t", pattern=P.PREFIXED, perm=DENY))
    assert not authz.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)
    authz = Authorizer(acls=[acl(op=Op.WRITE, name="*"), acl(op=Op.WRITE, name="*", perm=DENY)])
    assert not authz.authorize_by_resource_type(ALICE, HOST, Op.WRITE, R.TOPIC)


def test_binding_problems_as_kafka_refuses_them():
    assert acl().problem() is None
    assert acl(rtype=R.ANY).problem()
    assert acl(pattern=P.MATCH).problem()
    assert acl(op=Op.ANY).problem()
    assert acl(name="").problem()
    assert acl(rtype=R.CLUSTER, name="x").problem()
    assert acl(rtype=R.CLUSTER, name=CLUSTER_NAME).problem() is None


def test_filters():
    lit, pre, star = acl(name="payments"), acl(name="pay", pattern=P.PREFIXED), acl(name="*")
    match = AclBindingFilter(R.TOPIC, "payments", P.MATCH)
    assert all(match.matches(a) for a in (lit, pre, star))
    assert not match.matches(acl(name="pays", pattern=P.PREFIXED))
    anyp = AclBindingFilter(R.TOPIC, "payments", P.ANY)
    assert anyp.matches(lit) and not anyp.matches(pre) and not anyp.matches(star)
    assert AclBindingFilter(R.TOPIC, None, P.PREFIXED).matches(pre)
    assert not AclBindingFilter(principal=BOB).matches(lit)
    assert AclBindingFilter(operation=Op.READ, permission_type=ALLOW).matches(lit)


def test_acl_file_round_trip(tmp_path):
    acls = [acl(), acl(name="p", pattern=P.PREFIXED, perm=DENY, host=HOST),
            acl(rtype=R.CLUSTER, name=CLUSTER_NAME, op=Op.CLUSTER_ACTION)]
    write_acls(str(tmp_path), acls)
    assert sorted(load_acls(str(tmp_path))) == sorted(acls)
    assert load_acls(str(tmp_path / "missing")) == []


# --- the model: Kafka's rules read naively, over the whole ACL list ------------------

_IMPLIES = {Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
            Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}}


def reference(acls, super_users, allow_if_none, principal, host, op, rtype, name) -> bool:
    if principal in super_users:
        return True
    on_resource = [a for a in acls if a.resource_type == rtype and (
        (a.pattern_type == P.LITERAL and a.resource_name in (name, "*"))
        or (a.pattern_type == P.PREFIXED and name.startswith(a.resource_name)))]
    if not on_resource:
        return allow_if_none
    mine = [a for a in on_resource if a.principal in (principal, "User:*")
            and a.host in (host, "*")]
    if any(a.permission_type == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    return any(a.permission_type == ALLOW and (
        a.operation in (op, Op.ALL) or a.operation in _IMPLIES.get(op, ())) for a in mine)


NAMES = st.sampled_from(["a", "ab", "abc", "b", "*", "ba"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from(["*", "h1", "h2"])
OPS = st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER, Op.ALTER_CONFIGS,
                       Op.DESCRIBE_CONFIGS, Op.CREATE])
BINDINGS = st.builds(
    AclBinding, st.sampled_from([R.TOPIC, R.GROUP]), NAMES,
    st.sampled_from([P.LITERAL, P.PREFIXED]), PRINCIPALS, HOSTS, OPS,
    st.sampled_from([ALLOW, DENY]))
CHECK_OPS = OPS.filter(lambda op: op != Op.ALL)


class AuthorizerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.allow_if_none = False
        self.super_users = {BOB}
        self.authz = Authorizer(self.super_users, self.allow_if_none)
        self.model: set[AclBinding] = set()

    @rule(binding=BINDINGS)
    def add(self, binding):
        assert self.authz.add(binding) == (binding not in self.model)
        self.model.add(binding)

    @rule(data=st.data())
    def remove(self, data):
        binding = data.draw(st.sampled_from(sorted(self.model)) if self.model else BINDINGS)
        assert self.authz.remove(binding) == (binding in self.model)
        self.model.discard(binding)

    @rule(principal=st.sampled_from([ALICE, BOB, "User:carol"]), host=st.sampled_from(["h1", "h2"]),
          op=CHECK_OPS, rtype=st.sampled_from([R.TOPIC, R.GROUP]),
          name=st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "c", "*"]))
    def authorize(self, principal, host, op, rtype, name):
        expected = reference(self.model, self.super_users, self.allow_if_none, principal, host,
                             op, rtype, name)
        # Twice: the second answer comes from the decision cache.
        for _ in range(2):
            assert self.authz.authorize(principal, host, op, rtype, name) == expected

    @rule(flt=st.builds(AclBindingFilter, st.sampled_from([R.ANY, R.TOPIC, R.GROUP]),
                        st.one_of(st.none(), NAMES),
                        st.sampled_from([P.ANY, P.MATCH, P.LITERAL, P.PREFIXED]),
                        st.one_of(st.none(), PRINCIPALS)))
    def describe(self, flt):
        assert set(self.authz.matching(flt)) == {a for a in self.model if flt.matches(a)}

    @invariant()
    def same_set(self):
        assert self.authz.acls == self.model


AuthorizerModel.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                             deadline=None)
TestAuthorizerModel = AuthorizerModel.TestCase


@given(acls=st.lists(BINDINGS, max_size=12), allow_if_none=st.booleans(),
       principal=st.sampled_from([ALICE, "User:carol"]), op=CHECK_OPS,
       name=st.sampled_from(["a", "abc", "b", "zz"]))
@settings(deadline=None, max_examples=300)
def test_allow_everyone_if_no_acl_found_against_the_reference(acls, allow_if_none, principal,
                                                               op, name):
    authz = Authorizer((), allow_if_none, acls)
    assert authz.authorize(principal, "h1", op, R.TOPIC, name) == reference(
        set(acls), set(), allow_if_none, principal, "h1", op, R.TOPIC, name)
