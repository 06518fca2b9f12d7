"""Kafka's ACL types as the wire carries them (org.apache.kafka.common.acl and
.resource): resource, pattern, operation and permission types with their codes, an ACL
(AclBinding) and a filter over ACLs (AclBindingFilter).

Shared by the broker's authorizer (broker/security/authorizer.py), the ACL handlers and
the ``txbroker acls`` tool (tools/acls.py): one definition on both sides of the wire.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def from_code(cls: type[enum.IntEnum], code: int) -> enum.IntEnum:
    """Kafka's fromCode: a code it does not know is UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


R, Op = ResourceType, AclOperation


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def problem(self) -> str | None:
        """Why Kafka refuses to create this binding (INVALID_REQUEST), or None."""
        if self.resource_type in (R.UNKNOWN, R.ANY):
            return f"Invalid resourceType {self.resource_type.name}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid patternType {self.pattern_type.name}"
        if self.operation in (Op.UNKNOWN, Op.ANY):
            return f"Invalid operation {self.operation.name}"
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"Invalid permissionType {self.permission_type.name}"
        if self.resource_type == R.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if not self.resource_name:
            return "Invalid empty resource name"
        return None

    def describe(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation="
                f"{self.operation.name}, permissionType={self.permission_type.name}) on "
                f"{self.resource_type.name}:{self.pattern_type.name}:{self.resource_name}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None fields and ANY values match anything; pattern type
    MATCH matches every pattern that applies to the named resource."""

    resource_type: ResourceType = R.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = Op.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        return (self.resource_type == R.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == Op.UNKNOWN
                or self.permission_type == AclPermissionType.UNKNOWN)

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != R.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if pt == PatternType.ANY or pt == acl.pattern_type:
                if name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if name != acl.resource_name and acl.resource_name != WILDCARD_RESOURCE:
                    return False
            elif not name.startswith(acl.resource_name):  # PREFIXED
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != Op.ANY and self.operation != acl.operation:
            return False
        return (self.permission_type == AclPermissionType.ANY
                or self.permission_type == acl.permission_type)
