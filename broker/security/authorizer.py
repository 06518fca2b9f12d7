"""ACLs and the authorization decision, as Kafka's StandardAuthorizer makes it.

Plain code over plain data: no sockets, no files (acl_store.py keeps the ACLs durable,
broker/context.py asks the questions for the handlers; the ACL types themselves are
the wire's, protocol/acls.py). The rules, read from Kafka's StandardAuthorizerData and
the Authorizer interface:

* a principal named in ``super.users`` is allowed everything;
* the ACLs that apply to a resource are LITERAL ones with its exact name, LITERAL ones
  with the wildcard name ``*``, and PREFIXED ones whose name starts the resource's name;
* of those, the ones for the principal (or ``User:*``) and the client's host (or
  ``*``) decide: any DENY for the operation (or ALL) denies; else an ALLOW for the
  operation, for ALL, or for an operation that implies it (DESCRIBE is implied by READ,
  WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; implication holds for
  ALLOW only) allows;
* no ACL applying to the resource at all: ``allow.everyone.if.no.acl.found`` decides
  (default deny); ACLs on the resource but none for this principal/host/op: deny.
"""

from __future__ import annotations

from collections.abc import Iterable

from txbroker.protocol.acls import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Kafka 3's ZooKeeper-era class; Kafka 4 no longer has it, so neither do we.
ACCEPTED_AUTHORIZERS = (STANDARD_AUTHORIZER,)

R, Op = ResourceType, AclOperation
_IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})

# KIP-430's authorized operations: what each resource type supports (Kafka's AclEntry).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    R.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
              Op.ALTER_CONFIGS),
    R.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    R.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    R.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    R.DELEGATION_TOKEN: (Op.DESCRIBE,),
    R.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def entry_applies(acl: AclBinding, principal: str, host: str, op: AclOperation) -> bool | None:
    """Kafka's findResult for one ACL already known to apply to the resource: True
    (allows), False (denies) or None (says nothing about this principal/host/op)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    allow = acl.permission_type == AclPermissionType.ALLOW
    if acl.operation != Op.ALL:
        if not allow or op not in (Op.DESCRIBE, Op.DESCRIBE_CONFIGS):
            if acl.operation != op:
                return None
        elif op == Op.DESCRIBE and acl.operation not in _IMPLIES_DESCRIBE:
            return None
        elif op == Op.DESCRIBE_CONFIGS and acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
            return None
    return allow


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (Kafka trims each)."""
    return frozenset(v.strip() for v in text.split(";") if v.strip())


# Decisions remembered between ACL changes; beyond this many, the memory starts over
# (a client naming ever new topics cannot make it grow without bound).
DECISION_CACHE_MAX = 100_000


class Authorizer:
    """The ACL set with an index by resource, and the decision over it.

    The index: per resource type, LITERAL ACLs by exact name (the ``*`` wildcard is
    one of those names) and PREFIXED ACLs by prefix, with the set of prefix lengths in
    use, so finding the ACLs of a resource is a few dict lookups whatever the ACL
    count. Decisions are memoised per (principal, host, op, type, name) until the
    ACLs change: a produce request costs one dict lookup per topic."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False,
                 acls: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: set[AclBinding] = set()
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}  # length -> count
        self._cache: dict[tuple, bool] = {}
        for acl in acls:
            self._add(acl)

    # --- the ACL set ---------------------------------------------------------------

    @property
    def acls(self) -> frozenset[AclBinding]:
        return frozenset(self._acls)

    def __len__(self) -> int:
        return len(self._acls)

    def add(self, acl: AclBinding) -> bool:
        """Add one valid binding; False if it was there already."""
        if acl in self._acls:
            return False
        self._add(acl)
        self._cache.clear()
        return True

    def remove(self, acl: AclBinding) -> bool:
        if acl not in self._acls:
            return False
        self._acls.discard(acl)
        key = (acl.resource_type, acl.resource_name)
        if acl.pattern_type == PatternType.LITERAL:
            self._drop(self._literal, key, acl)
        else:
            self._drop(self._prefixed, key, acl)
            lengths = self._prefix_lengths[acl.resource_type]
            n = len(acl.resource_name)
            lengths[n] -= 1
            if not lengths[n]:
                del lengths[n]
        self._cache.clear()
        return True

    @staticmethod
    def _drop(index: dict, key: tuple, acl: AclBinding) -> None:
        entries = index[key]
        entries.remove(acl)
        if not entries:
            del index[key]

    def _add(self, acl: AclBinding) -> None:
        self._acls.add(acl)
        key = (acl.resource_type, acl.resource_name)
        if acl.pattern_type == PatternType.LITERAL:
            self._literal.setdefault(key, []).append(acl)
        else:
            self._prefixed.setdefault(key, []).append(acl)
            lengths = self._prefix_lengths.setdefault(acl.resource_type, {})
            n = len(acl.resource_name)
            lengths[n] = lengths.get(n, 0) + 1

    def matching(self, flt: AclBindingFilter) -> list[AclBinding]:
        """The bindings a filter matches, in a stable order (DescribeAcls, DeleteAcls)."""
        return sorted(acl for acl in self._acls if flt.matches(acl))

    # --- decisions -----------------------------------------------------------------

    def resource_acls(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL that applies to the resource (LITERAL exact and ``*``, PREFIXED)."""
        out = list(self._literal.get((rtype, name), ()))
        if name != WILDCARD_RESOURCE:
            out += self._literal.get((rtype, WILDCARD_RESOURCE), ())
        lengths = self._prefix_lengths.get(rtype)
        if lengths:
            prefixed = self._prefixed
            for n in lengths:
                if n <= len(name):
                    out += prefixed.get((rtype, name[:n]), ())
        return out

    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType,
                  name: str) -> bool:
        key = (principal, host, op, rtype, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, host, op, rtype, name)
            if len(self._cache) >= DECISION_CACHE_MAX:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.resource_acls(rtype, name)
        if not acls:
            return self.allow_if_no_acl
        allowed = False
        for acl in acls:
            result = entry_applies(acl, principal, host, op)
            if result is False:
                return False  # DENY wins
            if result:
                allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType,
                              name: str) -> int:
        """KIP-430's bit field: bit ``op`` set for each supported op allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation,
                                   rtype: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do ``op`` on
        at least one resource of the type? (InitProducerId without a transactional id
        accepts WRITE on any topic in place of IDEMPOTENT_WRITE on the cluster.)"""
        if self._decide(principal, host, op, rtype, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allow = False
        for acl in self._acls:
            if acl.resource_type != rtype:
                continue
            if acl.host != host and acl.host != WILDCARD_HOST:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != Op.ALL:
                continue
            literal = acl.pattern_type == PatternType.LITERAL
            if acl.permission_type == AclPermissionType.DENY:
                if literal and acl.resource_name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if literal else deny_prefixed).add(acl.resource_name)
            elif literal:
                if acl.resource_name == WILDCARD_RESOURCE:
                    wildcard_allow = True  # decides only if no DENY on "*" follows
                else:
                    allow_literal.add(acl.resource_name)
            else:
                allow_prefixed.add(acl.resource_name)
        if wildcard_allow:
            return True
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    return True
        return False
