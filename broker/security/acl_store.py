"""The ACLs in the data directory: one JSON file, replaced whole on every change.

A change is written to a temporary file, fsynced, renamed over the old file and the
directory fsynced, off the event loop; only then does the broker act on it (and
answer CreateAcls/DeleteAcls), so an acknowledged ACL change survives a SIGKILL or a
power loss. Changes are serialised: two concurrent requests cannot lose each other's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable

from txbroker.protocol.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from txbroker.storage.durable_file import write_durably

from .authorizer import Authorizer

log = logging.getLogger(__name__)

ACL_FILE = "acls.json"
FORMAT_VERSION = 1


class AclStoreError(Exception):
    """The ACL file exists but cannot be read: the broker must not start without it
    (starting with no ACLs would open, or close, everything)."""


def _encode(acl: AclBinding) -> dict:
    return {"resourceType": acl.resource_type.name, "name": acl.resource_name,
            "patternType": acl.pattern_type.name, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation.name,
            "permissionType": acl.permission_type.name}


def _decode(item: dict) -> AclBinding:
    acl = AclBinding(ResourceType[item["resourceType"]], str(item["name"]),
                     PatternType[item["patternType"]], str(item["principal"]),
                     str(item["host"]), AclOperation[item["operation"]],
                     AclPermissionType[item["permissionType"]])
    problem = acl.problem()
    if problem:
        raise ValueError(problem)
    return acl


def load_acls(data_dir: str) -> list[AclBinding]:
    path = os.path.join(data_dir, ACL_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise AclStoreError(f"cannot read the ACLs in {path}: {e}") from None
    try:
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"unknown format version {doc.get('version')!r}")
        return [_decode(item) for item in doc["acls"]]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise AclStoreError(f"cannot read the ACLs in {path}: {e!r}") from None


def write_acls(data_dir: str, acls: Iterable[AclBinding]) -> None:
    """Replace the ACL file durably (temp file, fsync, rename, fsync the directory)."""
    path = os.path.join(data_dir, ACL_FILE)
    body = json.dumps({"version": FORMAT_VERSION, "acls": [_encode(a) for a in sorted(acls)]},
                      indent=1)
    write_durably(path, body.encode())


class AclStore:
    """The authorizer's ACLs and their file; every change goes through ``change``."""

    def __init__(self, data_dir: str, authorizer: Authorizer) -> None:
        self.data_dir = data_dir
        self.authorizer = authorizer
        self._lock = asyncio.Lock()

    async def change(self, compute: Callable[[frozenset[AclBinding]], tuple[set, set]]) -> None:
        """``compute(current) -> (to_add, to_remove)``, run under the lock against the
        current set; the result is made durable, then applied."""
        async with self._lock:
            current = self.authorizer.acls
            to_add, to_remove = compute(current)
            to_add = set(to_add) - current
            to_remove = set(to_remove) & current
            if not to_add and not to_remove:
                return
            new = (current - to_remove) | to_add
            await asyncio.get_running_loop().run_in_executor(
                None, write_acls, self.data_dir, new)
            for acl in to_remove:
                self.authorizer.remove(acl)
            for acl in to_add:
                self.authorizer.add(acl)
            for acl in sorted(to_add):
                log.info("ACL added: %s", acl.describe())
            for acl in sorted(to_remove):
                log.info("ACL removed: %s", acl.describe())
