"""``txbroker acls``: add, list and remove ACLs, like Kafka's kafka-acls.sh.

    txbroker acls --bootstrap-server HOST:PORT --add --allow-principal User:alice \\
        --operation Read --operation Describe --topic orders --group billing-
        --resource-pattern-type prefixed
    txbroker acls --list [--topic orders] [--principal User:alice]
    txbroker acls --remove --allow-principal User:alice --operation Read --topic orders --force
    txbroker acls export [--target-bootstrap-server KAFKA:9092] > acls.sh

The same options as kafka-acls.sh; the action may also be given as a word
(``txbroker acls add ...``). Standard CreateAcls/DescribeAcls/DeleteAcls requests,
so the tool works against an Apache Kafka cluster too.
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import sys

from kio.schema.create_acls.v3 import request as ca
from kio.schema.delete_acls.v3 import request as da
from kio.schema.describe_acls.v3 import request as dsa
from kio.schema.errors import ErrorCode
from txbroker.protocol.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

from .cluster_client import ToolError, add_client_options, error_name, run_tool

CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = 30, 29, 31


def operation(text: str) -> AclOperation:
    """kafka-acls.sh's names: Read, IdempotentWrite, DESCRIBE_CONFIGS, ... (any case)."""
    key = text.replace("_", "").replace("-", "").upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise argparse.ArgumentTypeError(f"unknown operation {text!r}")


def principal(text: str) -> str:
    if ":" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a principal (Type:name, e.g. "
                                         f"User:alice)")
    return text


def _resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic or ()]
    out += [(ResourceType.GROUP, g) for g in args.group or ()]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id or ()]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern(args, default: PatternType) -> PatternType:
    return PatternType[args.resource_pattern_type.upper()] if args.resource_pattern_type \
        else default


def bindings(args) -> list[AclBinding]:
    """--add: every resource x (allow principals x allow hosts | deny principals x deny
    hosts) x operation, as kafka-acls.sh expands them."""
    pattern = _pattern(args, PatternType.LITERAL)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ToolError("--add takes --resource-pattern-type literal or prefixed")
    resources = _resources(args)
    if not resources:
        raise ToolError("--add needs a resource: --topic, --group, --transactional-id or "
                        "--cluster")
    if not (args.allow_principal or args.deny_principal):
        raise ToolError("--add needs --allow-principal or --deny-principal")
    ops = args.operation or [AclOperation.ALL]
    out = []
    for perm, principals, hosts in (
            (AclPermissionType.ALLOW, args.allow_principal or (), args.allow_host or ["*"]),
            (AclPermissionType.DENY, args.deny_principal or (), args.deny_host or ["*"])):
        for (rtype, name), who, host, op in itertools.product(resources, principals, hosts, ops):
            out.append(AclBinding(rtype, name, pattern, who, host, op, perm))
    return out


def filters(args, resources_optional: bool) -> list[dict]:
    """--list / --remove: one filter per resource (all resources if none is named and
    that is allowed) and per principal/host/operation given; None matches anything."""
    pattern = _pattern(args, PatternType.LITERAL)
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args))
    if not resources:
        if not resources_optional:
            raise ToolError("--remove needs a resource: --topic, --group, --transactional-id "
                            "or --cluster")
        resources, pattern = [(ResourceType.ANY, None)], PatternType.ANY
    entries: list[tuple[str | None, str | None, AclPermissionType]] = []
    for perm, principals, hosts in (
            (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
            (AclPermissionType.DENY, args.deny_principal, args.deny_host)):
        for who in principals or ():
            for host in hosts or [None]:
                entries.append((who, host, perm))
    if not entries:
        entries = [(p, None, AclPermissionType.ANY) for p in (args.principal or [None])]
    ops = args.operation or [AclOperation.ANY]
    return [dict(resource_type_filter=rtype, resource_name_filter=name,
                 pattern_type_filter=pattern, principal_filter=who, host_filter=host,
                 operation=op, permission_type=perm)
            for (rtype, name), (who, host, perm), op in itertools.product(resources, entries, ops)]


def _pattern_text(rtype: int, name: str, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={ResourceType(rtype).name}, name={name}, "
            f"patternType={PatternType(pattern).name})")


def _entry_text(principal_: str, host: str, op: int, perm: int) -> str:
    return (f"(principal={principal_}, host={host}, operation={AclOperation(op).name}, "
            f"permissionType={AclPermissionType(perm).name})")


def cmd_add(cluster, args) -> int:
    wanted = bindings(args)
    resp = cluster.bootstrap.request(CREATE_ACLS, 3, ca.CreateAclsRequest(creations=tuple(
        ca.AclCreation(resource_type=b.resource_type, resource_name=b.resource_name,
                       resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                       operation=b.operation, permission_type=b.permission_type)
        for b in wanted)))
    failed = [(b, r) for b, r in zip(wanted, resp.results, strict=True)
              if r.error_code != ErrorCode.none]
    for b, r in failed:
        print(f"error: cannot add {b.describe()}: {error_name(r.error_code)}"
              + (f": {r.error_message}" if r.error_message else ""), file=sys.stderr)
    added = [b for b in wanted if b not in {f[0] for f in failed}]
    for (rtype, name, pattern), group in itertools.groupby(
            sorted(added), key=lambda b: (b.resource_type, b.resource_name, b.pattern_type)):
        print(f"Adding ACLs for resource `{_pattern_text(rtype, name, pattern)}`: ")
        for b in group:
            print(f" \t{_entry_text(b.principal, b.host, b.operation, b.permission_type)} ")
    return 1 if failed else 0


def _describe(cluster, flt: dict):
    resp = cluster.bootstrap.request(DESCRIBE_ACLS, 3, dsa.DescribeAclsRequest(**flt))
    if resp.error_code != ErrorCode.none:
        raise ToolError(f"DescribeAcls: {error_name(resp.error_code)}"
                        + (f": {resp.error_message}" if resp.error_message else ""))
    return resp.resources


def cmd_list(cluster, args) -> int:
    found: dict[tuple, set] = {}
    for flt in filters(args, resources_optional=True):
        for res in _describe(cluster, flt):
            entries = found.setdefault(
                (res.resource_type, res.resource_name, res.pattern_type), set())
            entries.update((a.principal, a.host, a.operation, a.permission_type)
                           for a in res.acls)
    for key in sorted(found):
        print(f"Current ACLs for resource `{_pattern_text(*key)}`: ")
        for entry in sorted(found[key]):
            print(f" \t{_entry_text(*entry)} ")
        print("")
    return 0


def cmd_remove(cluster, args) -> int:
    flts = filters(args, resources_optional=False)
    if not args.force:
        print("Are you sure you want to remove ACLs matching "
              f"{len(flts)} filter(s) (e.g. {_filter_text(flts[0])})? (y/n)")
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            return 1
    resp = cluster.bootstrap.request(DELETE_ACLS, 3, da.DeleteAclsRequest(filters=tuple(
        da.DeleteAclsFilter(**flt) for flt in flts)))
    failed = 0
    for result in resp.filter_results:
        if result.error_code != ErrorCode.none:
            print(f"error: DeleteAcls: {error_name(result.error_code)}"
                  + (f": {result.error_message}" if result.error_message else ""),
                  file=sys.stderr)
            failed = 1
            continue
        for a in result.matching_acls:
            print(f"Removed {_entry_text(a.principal, a.host, a.operation, a.permission_type)} "
                  f"from `{_pattern_text(a.resource_type, a.resource_name, a.pattern_type)}`")
    return failed


# kafka-acls.sh's resource options.
RESOURCE_OPTIONS = {ResourceType.TOPIC: "--topic", ResourceType.GROUP: "--group",
                    ResourceType.TRANSACTIONAL_ID: "--transactional-id",
                    ResourceType.DELEGATION_TOKEN: "--delegation-token",
                    ResourceType.USER: "--user-principal"}


def export_lines(resources, bootstrap: str, command_config: str | None = None) -> list[str]:
    """DescribeAcls' answer as kafka-acls.sh command lines that recreate it on Kafka: one
    per resource pattern, principal, host and permission, with all its operations."""
    grouped: dict[tuple, set[str]] = {}
    for res in resources:
        for a in res.acls:
            key = (res.resource_type, res.resource_name, res.pattern_type, a.principal,
                   a.host, a.permission_type)
            grouped.setdefault(key, set()).add(
                "".join(w.capitalize() for w in AclOperation(a.operation).name.split("_")))
    lines = []
    for (rtype, name, pattern, who, host, perm), ops in sorted(grouped.items()):
        side = "allow" if perm == AclPermissionType.ALLOW else "deny"
        words = ["kafka-acls.sh", "--bootstrap-server", bootstrap]
        if command_config:
            words += ["--command-config", command_config]
        words += ["--add", f"--{side}-principal", who, f"--{side}-host", host]
        for op in sorted(ops):
            words += ["--operation", op]
        resource = ResourceType(rtype)
        words += ["--cluster"] if resource == ResourceType.CLUSTER else \
            [RESOURCE_OPTIONS[resource], name]
        words += ["--resource-pattern-type", PatternType(pattern).name.lower()]
        # "$VAR" stays a shell variable; everything else is quoted as it is.
        lines.append(" ".join(f'"{w}"' if w.startswith("$") else shlex.quote(w)
                              for w in words))
    return lines


def cmd_export(cluster, args) -> int:
    resources = _describe(cluster, dict(
        resource_type_filter=ResourceType.ANY, resource_name_filter=None,
        pattern_type_filter=PatternType.ANY, principal_filter=None, host_filter=None,
        operation=AclOperation.ANY, permission_type=AclPermissionType.ANY))
    lines = export_lines(resources, args.target_bootstrap_server, args.target_command_config)
    print("#!/bin/sh\n# ACLs exported from txbroker: run against the Kafka cluster "
          "(its brokers need an authorizer,\n# e.g. authorizer.class.name="
          "org.apache.kafka.metadata.authorizer.StandardAuthorizer).\nset -e")
    for line in lines:
        print(line)
    print(f"{len(lines)} kafka-acls.sh command(s) exported", file=sys.stderr)
    return 0


def _filter_text(flt: dict) -> str:
    return ", ".join(f"{k.removesuffix('_filter')}={v.name if hasattr(v, 'name') else v}"
                     for k, v in flt.items() if v is not None)


def add_parser(sub) -> None:
    p = sub.add_parser("acls", help="ACLs, like kafka-acls.sh",
                       description=__doc__.replace("``", ""),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    p.add_argument("action", nargs="?", choices=("add", "list", "remove", "export"),
                   help="the action as a word (or --add/--list/--remove)")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--add", action="store_true", help="add ACLs")
    act.add_argument("--list", action="store_true", help="list ACLs (all, or the resources "
                                                          "named)")
    act.add_argument("--remove", action="store_true", help="remove ACLs")
    p.add_argument("--allow-principal", action="append", type=principal, metavar="PRINCIPAL",
                   help="e.g. User:alice, User:* (repeatable)")
    p.add_argument("--deny-principal", action="append", type=principal, metavar="PRINCIPAL",
                   help="(repeatable)")
    p.add_argument("--allow-host", action="append", metavar="HOST",
                   help="client address the allow ACLs apply to (default *; repeatable)")
    p.add_argument("--deny-host", action="append", metavar="HOST",
                   help="client address the deny ACLs apply to (default *; repeatable)")
    p.add_argument("--principal", action="append", type=principal,
                   help="--list: only ACLs of this principal (repeatable)")
    p.add_argument("--operation", action="append", type=operation, metavar="OPERATION",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite, All (default All "
                        "for --add; repeatable)")
    p.add_argument("--topic", action="append", help="(repeatable; * for every topic)")
    p.add_argument("--group", action="append", help="(repeatable)")
    p.add_argument("--transactional-id", action="append", help="(repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type",
                   choices=("literal", "prefixed", "match", "any"),
                   help="literal (default) or prefixed; --list/--remove also take match "
                        "(every ACL that applies to the named resource) and any")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.add_argument("--export", action="store_true",
                   help="print kafka-acls.sh commands that recreate every ACL on Kafka")
    p.add_argument("--target-bootstrap-server", default="$KAFKA_BOOTSTRAP",
                   help="export: the Kafka cluster the commands address (default: the "
                        "shell variable KAFKA_BOOTSTRAP)")
    p.add_argument("--target-command-config", metavar="FILE",
                   help="export: kafka-acls.sh --command-config for the Kafka cluster")


def run(args) -> int:
    chosen = [a for a in ("add", "list", "remove", "export")
              if getattr(args, a) or args.action == a]
    if len(chosen) != 1:
        print("error: give exactly one of --add, --list, --remove, --export", file=sys.stderr)
        return 2
    commands = {"add": cmd_add, "list": cmd_list, "remove": cmd_remove, "export": cmd_export}
    return run_tool(args, commands, chosen[0])
