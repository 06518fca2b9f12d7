"""``txbroker faults add | list | remove``: install, list and remove faults in a running
txbroker through its admin HTTP endpoint (``admin.http.port``; docs/fault-injection.md).

The endpoint is HTTP, not Kafka: faults are txbroker's own, so this tool talks to
``POST/GET/DELETE /faults`` with the bearer token of ``admin.http.auth.token.file``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"
# add's options -> fault keys (docs/fault-injection.md); --json takes a whole spec.
_SPEC_OPTIONS = ("api", "version", "client_id", "except_client_id", "principal", "topic", "partition",
                 "transactional_id", "group_id", "error", "delay_ms", "count", "after",
                 "profile", "point", "action")


class AdminError(Exception):
    pass


def _request(args, method: str, path: str, body: Any = None) -> Any:
    url = (args.admin_url or os.environ.get("TXBROKER_ADMIN_URL") or DEFAULT_URL).rstrip("/")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    token = _token(args)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace").strip()
        if e.code == 401:
            detail += " (pass --token-file, or set TXBROKER_ADMIN_TOKEN)"
        raise AdminError(f"{method} {url}{path}: HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise AdminError(f"cannot reach the admin endpoint {url}: {reason} (is "
                         f"admin.http.port set? --admin-url)") from None


def _token(args) -> str | None:
    if args.token_file:
        try:
            with open(args.token_file) as f:
                return f.read().strip()
        except OSError as e:
            raise AdminError(f"cannot read --token-file {args.token_file}: {e.strerror}") from None
    return os.environ.get("TXBROKER_ADMIN_TOKEN") or None


def _spec(args) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if args.json:
        try:
            spec = json.loads(args.json)
        except json.JSONDecodeError as e:
            raise AdminError(f"--json is not JSON: {e}") from None
        if not isinstance(spec, dict):
            raise AdminError("--json takes one fault object")
    for key in _SPEC_OPTIONS:
        value = getattr(args, key)
        if value is not None:
            spec[key] = value
    if args.api and len(args.api) == 1:
        spec["api"] = args.api[0]
    for flag in ("drop", "close"):
        if getattr(args, flag):
            spec[flag] = True
    if args.refuse_connections:
        spec["connections"] = "refuse"
    if args.hang is not None:
        spec.update(broker="hang", ms=args.hang)
    for flag, action in (("crash", "crash"), ("power_loss", "power_loss")):
        if getattr(args, flag):
            spec["broker"] = action
    return spec


def _show(rows: list[dict[str, Any]]) -> None:
    header = ["ID", "ACTIVE", "FIRED", "SEEN", "FAULT"]
    table = [[r["id"], "yes" if r["active"] else "no", str(r["fired"]), str(r["seen"]),
              " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                       for k, v in r.items() if k not in ("id", "active", "fired", "seen"))]
             for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *table, strict=False)]
    for row in [header, *table]:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)).rstrip())


def cmd_add(args) -> int:
    rows = _request(args, "POST", "/faults", _spec(args))
    _show(rows)
    return 0


def cmd_list(args) -> int:
    rows = _request(args, "GET", "/faults")
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    else:
        _show(rows)
    return 0


def cmd_remove(args) -> int:
    if args.all:
        removed = _request(args, "DELETE", "/faults")["removed"]
        print(f"removed {removed} fault(s)")
        return 0
    if not args.id:
        raise AdminError("remove needs fault ids (see `txbroker faults list`) or --all")
    for fault_id in args.id:
        _show([_request(args, "DELETE", f"/faults/{fault_id}")])
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("faults", help="inject faults into a running txbroker (admin endpoint)",
                       description=__doc__.replace("``", ""),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    fsub = p.add_subparsers(dest="faults_command", required=True)
    add = fsub.add_parser("add", help="install a fault (docs/fault-injection.md)")
    match = add.add_argument_group("what it matches")
    match.add_argument("--api", action="append",
                       help="API name (Produce, TxnOffsetCommit, ...) or key; repeatable; "
                            "* for every API")
    match.add_argument("--version", type=int, help="only this request version")
    match.add_argument("--client-id")
    match.add_argument("--except-client-id", help="let this client's requests through")
    match.add_argument("--principal", help="e.g. User:alice")
    match.add_argument("--topic")
    match.add_argument("--partition", type=int)
    match.add_argument("--transactional-id")
    match.add_argument("--group-id")
    action = add.add_argument_group("what it does (one of)")
    action.add_argument("--error", help="answer with this Kafka error (name or code)")
    action.add_argument("--delay-ms", type=int, help="answer this much later")
    action.add_argument("--drop", action="store_true",
                        help="serve the request, never answer (the connection goes silent)")
    action.add_argument("--close", action="store_true",
                        help="close the connection instead of serving the request")
    action.add_argument("--refuse-connections", action="store_true",
                        help="close new connections as they come")
    action.add_argument("--hang", type=int, metavar="MS",
                        help="the broker serves and answers nothing for MS ms, on every "
                             "connection (a long GC pause), then serves what it held")
    action.add_argument("--crash", action="store_true",
                        help="the broker crashes now (exit 137, as after SIGKILL)")
    action.add_argument("--power-loss", action="store_true",
                        help="the broker loses power now: what was not fsynced is lost, "
                             "then as --crash")
    action.add_argument("--point", help="a commit-protocol point (before_markers, ...)")
    action.add_argument("--action", help="the point's action: crash, power_loss, delay:MS, "
                                         "drop, expire")
    action.add_argument("--profile", help="a preset: coordinator_moved, coordinator_loading, "
                                          "leader_moved")
    budget = add.add_argument_group("budget")
    budget.add_argument("--count", type=int, help="act this many times (default: until removed)")
    budget.add_argument("--after", type=int, help="let this many matches through first")
    add.add_argument("--json", help="the whole fault as JSON (the options add to it)")
    ls = fsub.add_parser("list", help="the faults with how often each fired")
    ls.add_argument("--output", choices=("table", "json"), default="table")
    rm = fsub.add_parser("remove", help="remove faults by id")
    rm.add_argument("id", nargs="*")
    rm.add_argument("--all", action="store_true", help="remove every fault")
    for cmd in (add, ls, rm):
        cmd.add_argument("--admin-url", help=f"the admin endpoint (default: $TXBROKER_ADMIN_URL "
                                             f"or {DEFAULT_URL})")
        cmd.add_argument("--token-file", help="file holding the bearer token "
                                              "(default: $TXBROKER_ADMIN_TOKEN)")
        cmd.add_argument("--timeout", type=float, default=30, help="seconds (default: 30)")


def run(args) -> int:
    commands = {"add": cmd_add, "list": cmd_list, "remove": cmd_remove}
    try:
        return commands[args.faults_command](args)
    except AdminError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
