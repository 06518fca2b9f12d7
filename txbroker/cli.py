"""The ``txbroker`` command (and ``python -m txbroker``): ``serve`` runs the broker
(broker/main.py); ``topics``, ``groups``, ``transactions``, ``users`` and ``acls`` are
Kafka-style admin tools (tools/) that talk to any Kafka broker over the wire; ``faults``
talks to a txbroker's admin HTTP endpoint.

This module is the one place that knows both: the broker does not import the tools and
the tools do not import the broker. ``serve`` builds only its own parser and imports
nothing of the tools: after a crash, the broker's start-up time is the outage."""

from __future__ import annotations

import argparse
import logging
import sys

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--override needs key=value, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


class _VersionAction(argparse.Action):
    """--version, with the version looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from txbroker import __version__

        print(f"txbroker {__version__}")
        parser.exit()


class _CommandListFormatter(argparse.HelpFormatter):
    """argparse sizes the help column without the commands' extra indent, which puts
    "transactions" and its description on two lines; start the column past it."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog)
        self._action_max_length = max(self._action_max_length, len("    transactions"))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command="serve"`` only serve's, because the tools'
    parsers import their protocol schemas and the broker's start-up time is an outage
    after a crash."""
    parser = argparse.ArgumentParser(
        prog="txbroker",
        description="A Kafka-compatible broker with transactions at its centre, and Kafka-style "
                    "admin tools that work against txbroker and Apache Kafka alike.",
        epilog="Run 'txbroker COMMAND --help' for a command's options. Docs: README.md, "
               "docs/configuration.md, docs/tools.md.",
        formatter_class=_CommandListFormatter)
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, title="commands",
                                metavar="COMMAND")
    s = sub.add_parser("serve", help="run the broker",
                       description="Run the broker. Config sources, later ones winning: "
                                   "defaults < --config file < TXBROKER_* environment "
                                   "variables < --host/--port/--data-dir and --override "
                                   "(docs/configuration.md).")
    s.add_argument("--host", help="listen address; with --port it sets listeners "
                                  "(default: the listeners host, 127.0.0.1)")
    s.add_argument("--port", type=int,
                   help="listen port; 0 = any free port (default: the listeners port, 9092)")
    s.add_argument("--data-dir", help="data directory, sets log.dirs (default: ./txbroker-data)")
    s.add_argument("--config", metavar="FILE",
                   help="Kafka-style properties file (Kafka's server.properties works)")
    s.add_argument("--override", action="append", type=_parse_override, default=[],
                   metavar="KEY=VALUE", help="set any config key (repeatable; default: none)")
    s.add_argument("--log-level", default="INFO", help=f"{', '.join(LOG_LEVELS)} (default: INFO)")
    if command == "serve":
        return parser
    from txbroker.tools import acls, faults, groups, topics, transactions, users

    topics.add_parser(sub)
    groups.add_parser(sub)
    transactions.add_parser(sub)
    users.add_parser(sub)
    acls.add_parser(sub)
    faults.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser("serve" if argv[:1] == ["serve"] else None).parse_args(argv)
    level = getattr(args, "log_level", "WARNING").upper()
    if level not in LOG_LEVELS:
        print(f"txbroker: configuration error: --log-level {args.log_level!r} is not one of "
              f"{', '.join(LOG_LEVELS)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    if args.command == "serve":
        from txbroker.broker.main import run

        return run(args)
    if args.command == "transactions":
        from txbroker.tools.transactions import run

        return run(args)
    if args.command == "topics":
        from txbroker.tools.topics import run

        return run(args)
    if args.command == "acls":
        from txbroker.tools.acls import run

        return run(args)
    if args.command == "groups":
        from txbroker.tools.groups import run

        return run(args)
    if args.command == "users":
        from txbroker.tools.users import run

        return run(args)
    if args.command == "faults":
        from txbroker.tools.faults import run

        return run(args)
    return 2
