"""``txbroker users add|list|remove``: SCRAM users, over the Kafka protocol
(DescribeUserScramCredentials, AlterUserScramCredentials; KIP-554), so it manages the
users of txbroker and of an Apache Kafka cluster alike.

As in KIP-554, the tool salts and hashes the password itself and sends only the salted
password; the password never travels. kafka-configs.sh's own syntax works too:

  txbroker users --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]' \\
      --entity-type users --entity-name alice
  txbroker users --describe --entity-type users [--entity-name alice]
  txbroker users --alter --delete-config SCRAM-SHA-256 --entity-type users --entity-name alice
  txbroker users export [--target-bootstrap-server KAFKA:9092] > users.sh

export prints kafka-configs.sh commands that create the same users, mechanisms and
iterations on Kafka; the passwords come from shell variables the script names: SCRAM
storage (txbroker's, like Kafka's) keeps only the stored and server keys, from which
neither the password nor the salted password Kafka's AlterUserScramCredentials takes
can be recovered.
"""

from __future__ import annotations

import argparse
import getpass
import re
import secrets
import shlex
import sys

from kio.schema.alter_user_scram_credentials.v0 import request as aus
from kio.schema.describe_user_scram_credentials.v0 import request as dus
from kio.schema.errors import ErrorCode
from txbroker.protocol import scram

from . import cluster_client
from .cluster_client import (
    Cluster,
    ToolError,
    add_client_options,
    add_client_options_to_subcommands,
    echo,
    error_name,
    run_tool,
)

# KIP-554's mechanism codes (Kafka's ScramMechanism type ids).
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default


def _mechanism(name: str) -> str:
    upper = name.strip().upper()
    if upper not in MECHANISM_CODES:
        raise ToolError(f"mechanism {name!r} is not one of {', '.join(MECHANISM_CODES)}")
    return upper


def describe(cluster: Cluster, users: list[str] | None) -> dict[str, list[tuple[str, int]]]:
    """user -> [(mechanism, iterations)], for ``users`` (None: every user with a
    credential). A named user without credentials is an error (RESOURCE_NOT_FOUND)."""
    resp = cluster.bootstrap.request(50, 0, dus.DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(dus.UserName(name=u) for u in users)))
    if resp.error_code != ErrorCode.none:
        raise ToolError(f"DescribeUserScramCredentials: {error_name(resp.error_code)}"
                        + (f": {resp.error_message}" if resp.error_message else ""))
    out = {}
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            raise ToolError(f"user {r.user!r}: {error_name(r.error_code)}"
                            + (f": {r.error_message}" if r.error_message else ""))
        out[r.user] = sorted((MECHANISM_NAMES.get(c.mechanism, f"UNKNOWN({c.mechanism})"),
                              c.iterations) for c in r.credential_infos)
    return out


def alter(cluster: Cluster, upserts: list[tuple[str, str, int, str]],
          deletions: list[tuple[str, str]]) -> None:
    """Upsert (user, mechanism, iterations, password) and delete (user, mechanism)
    credentials; the password is salted and hashed here (KIP-554). One request per
    change: Kafka refuses a request that alters one user twice (DUPLICATE_RESOURCE),
    even for two mechanisms."""
    failures = []
    for user, mech, iterations, password in upserts:
        if iterations > scram.MAX_ITERATIONS:
            # Checked here too: hashing with a huge count would cost this process first.
            raise ToolError(f"UNACCEPTABLE_CREDENTIAL: iterations {iterations} is greater than "
                            f"the maximum {scram.MAX_ITERATIONS} for {mech}")
        salt = secrets.token_bytes(32)
        salted = scram.salted_password(scram.mechanism(mech), password, salt, max(iterations, 1))
        failures += _alter(cluster, upsertions=(aus.ScramCredentialUpsertion(
            name=user, mechanism=MECHANISM_CODES[mech], iterations=iterations, salt=salt,
            salted_password=salted),))
    for user, mech in deletions:
        failures += _alter(cluster, deletions=(aus.ScramCredentialDeletion(
            name=user, mechanism=MECHANISM_CODES[mech]),))
    if failures:
        raise ToolError("; ".join(failures))


def _alter(cluster: Cluster, upsertions: tuple = (), deletions: tuple = ()) -> list[str]:
    resp = cluster.bootstrap.request(51, 0, aus.AlterUserScramCredentialsRequest(
        deletions=deletions, upsertions=upsertions))
    return [f"user {r.user!r}: {error_name(r.error_code)}"
            + (f": {r.error_message}" if r.error_message else "")
            for r in resp.results if r.error_code != ErrorCode.none]


def _password(args) -> str:
    """--password, --password-file, --password-stdin, else a prompt (twice)."""
    if args.password is not None:
        return args.password
    if args.password_file is not None:
        try:
            with open(args.password_file) as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise ToolError(f"cannot read --password-file {args.password_file}: "
                            f"{e.strerror}") from None
    if args.password_stdin or not sys.stdin.isatty():
        line = sys.stdin.readline()
        if not line:
            raise ToolError("no password on standard input")
        return line.rstrip("\r\n")
    first = getpass.getpass(f"Password for {args.user}: ")
    if getpass.getpass("Again: ") != first:
        raise ToolError("the passwords differ")
    return first


def cmd_add(cluster: Cluster, args) -> int:
    password = _password(args)
    if not password:
        raise ToolError("the password is empty")
    mechanisms = [_mechanism(m) for m in (args.mechanism or ["SCRAM-SHA-256"])]
    alter(cluster, [(args.user, m, args.iterations, password) for m in mechanisms], [])
    echo(f"Added {', '.join(mechanisms)} credentials for user {args.user!r} "
         f"({args.iterations} iterations).")
    return 0


def cmd_list(cluster: Cluster, args) -> int:
    found = describe(cluster, args.user or None)
    cluster_client.table([[user, mech, iterations] for user in sorted(found)
                          for mech, iterations in found[user]],
                         ["User", "Mechanism", "Iterations"])
    return 0


def cmd_remove(cluster: Cluster, args) -> int:
    if args.mechanism:
        mechanisms = [_mechanism(m) for m in args.mechanism]
    else:
        mechanisms = [m for m, _ in describe(cluster, [args.user]).get(args.user, [])]
    alter(cluster, [], [(args.user, m) for m in mechanisms])
    echo(f"Removed {', '.join(mechanisms)} credentials of user {args.user!r}.")
    return 0


# --- kafka-configs.sh's syntax ------------------------------------------------------------


def parse_add_config(text: str) -> list[tuple[str, int, str]]:
    """kafka-configs.sh's ``--add-config``, for users:
    ``SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]``
    -> [(mechanism, iterations, password)]. Like Kafka, commas split the list outside
    brackets; inside brackets they separate key=value pairs."""
    items = re.findall(r"\s*([^=,\[\]]+)=(\[[^\]]*\]|[^,]*)\s*(?:,|$)", text)
    if not items or ",".join(f"{k}={v}" for k, v in items).replace(" ", "") \
            != text.strip().replace(" ", ""):
        raise ToolError(f"--add-config {text!r}: expected e.g. "
                        "'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'")
    out = []
    for key, value in items:
        mech = _mechanism(key)
        fields = {}
        for part in value.strip("[]").split(","):
            name, sep, val = part.partition("=")
            if not sep:
                raise ToolError(f"--add-config {key}: {part!r} is not key=value")
            fields[name.strip()] = val
        if "password" not in fields:
            raise ToolError(f"--add-config {key} needs password=...")
        unknown = sorted(set(fields) - {"password", "iterations"})
        if unknown:
            raise ToolError(f"--add-config {key}: unknown {', '.join(unknown)} "
                            "(password, iterations)")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise ToolError(f"--add-config {key}: iterations must be a number") from None
        out.append((mech, iterations, fields["password"]))
    return out


def cmd_configs(cluster: Cluster, args) -> int:
    """kafka-configs.sh --describe / --alter for --entity-type users."""
    if args.entity_type not in (None, "users"):
        raise ToolError(f"--entity-type {args.entity_type}: txbroker users handles users "
                        "(SCRAM credentials) only")
    name = args.entity_name or args.user_option
    if args.describe:
        found = describe(cluster, [name] if name else None)
        for user in sorted(found):
            creds = ", ".join(f"{m}=iterations={i}" for m, i in found[user])
            echo(f"SCRAM credential configs for user-principal '{user}' are {creds}")
        return 0
    if not name:
        raise ToolError("--alter needs --entity-name USER (or --user USER)")
    if not args.add_config and not args.delete_config:
        raise ToolError("--alter needs --add-config or --delete-config")
    upserts = [(name, m, i, p) for config in args.add_config or ()
               for m, i, p in parse_add_config(config)]
    deletions = [(name, _mechanism(m)) for config in args.delete_config or ()
                 for m in config.split(",") if m.strip()]
    alter(cluster, upserts, deletions)
    echo(f"Completed updating config for user {name}.")
    return 0


def cmd_export(cluster: Cluster, args) -> int:
    found = describe(cluster, None)
    print("#!/bin/sh\n# SCRAM users exported from txbroker, to create on Kafka. The passwords "
          "are not\n# exported (txbroker keeps only SCRAM's stored and server keys): set "
          "each\n# PASSWORD_<n> below to the user's password before running this.\nset -eu")
    n = 0
    for n, user in enumerate(sorted(found), 1):
        print(f"# PASSWORD_{n}: {user}")
        for mech, iterations in found[user]:
            words = ["kafka-configs.sh", "--bootstrap-server", args.target_bootstrap_server,
                     "--alter", "--entity-type", "users", "--entity-name", user,
                     "--add-config", f"{mech}=[iterations={iterations},password=$PASSWORD_{n}]"]
            # the bootstrap's and password's "$VARS" stay for the shell to expand
            print(" ".join(f'"{w}"' if "$" in w else shlex.quote(w) for w in words))
    print(f"{n} user(s) exported", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "users", help="SCRAM users (KIP-554), like kafka-configs.sh --entity-type users",
        description=__doc__.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    kafka = p.add_argument_group("kafka-configs.sh's syntax (instead of a subcommand)")
    mode = kafka.add_mutually_exclusive_group()
    mode.add_argument("--describe", action="store_true", help="list SCRAM credentials")
    mode.add_argument("--alter", action="store_true", help="add or delete credentials")
    kafka.add_argument("--entity-type", choices=["users"])
    kafka.add_argument("--entity-name", metavar="USER")
    kafka.add_argument("--user", dest="user_option", metavar="USER",
                       help="same as --entity-type users --entity-name USER")
    kafka.add_argument("--add-config", action="append", metavar="MECH=[...]",
                       help="'SCRAM-SHA-256=[iterations=8192,password=SECRET]' (repeatable)")
    kafka.add_argument("--delete-config", action="append", metavar="MECH",
                       help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (comma-separated)")
    usub = p.add_subparsers(dest="users_command")
    add = usub.add_parser("add", help="add a user or change its password")
    add.add_argument("user")
    add.add_argument("--mechanism", action="append", metavar="MECH",
                     help="SCRAM-SHA-256 (default) or SCRAM-SHA-512 (repeatable)")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations, {scram.MIN_ITERATIONS}..{scram.MAX_ITERATIONS} "
                          f"(default {DEFAULT_ITERATIONS})")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (visible to other local users in "
                                           "the process list: prefer the other ways)")
    source.add_argument("--password-file", metavar="FILE", help="the first line of FILE")
    source.add_argument("--password-stdin", action="store_true",
                        help="one line from standard input (the default when it is not "
                             "a terminal; on a terminal the password is prompted for)")
    ls = usub.add_parser("list", help="users, mechanisms and iterations")
    ls.add_argument("user", nargs="*", help="only these users")
    rm = usub.add_parser("remove", help="remove a user's credentials")
    rm.add_argument("user")
    rm.add_argument("--mechanism", action="append", metavar="MECH",
                    help="only this mechanism (repeatable; default: all the user has)")
    ex = usub.add_parser("export", help="kafka-configs.sh commands that create the users "
                                        "on Kafka (passwords supplied by you)")
    ex.add_argument("--target-bootstrap-server", default="$KAFKA_BOOTSTRAP",
                    help="the Kafka cluster the commands address (default: the shell "
                         "variable KAFKA_BOOTSTRAP)")
    add_client_options_to_subcommands(add, ls, rm, ex)


def run(args) -> int:
    if args.users_command is None:
        if not (args.describe or args.alter):
            print("error: give a command (add, list, remove) or kafka-configs.sh's "
                  "--describe/--alter", file=sys.stderr)
            return 2
        return run_tool(args, {"configs": cmd_configs}, "configs")
    if args.describe or args.alter or args.add_config or args.delete_config:
        print("error: kafka-configs.sh's options go without a subcommand", file=sys.stderr)
        return 2
    commands = {"add": cmd_add, "list": cmd_list, "remove": cmd_remove, "export": cmd_export}
    return run_tool(args, commands, args.users_command)
