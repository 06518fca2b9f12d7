"""Command line: ``txbroker serve``, and Kafka-style admin tools (``topics``, ``groups``,
``transactions``, ``users``) that talk to any Kafka broker over the wire."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on use: `txbroker serve` starts without the tools' modules
    from .config import BrokerConfig
    from .server import Broker

log = logging.getLogger("txbroker")


def _raise_fd_limit() -> None:
    # Every segment keeps its file open; take the hard limit like Kafka's scripts advise.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def preflight(config: BrokerConfig) -> None:
    """What can be checked before anything is opened, with a message that says what it
    is about (StartupError): hosts that do not resolve, a data directory that is not one."""
    from .config import StartupError

    host, port = config.listener
    _resolves(host, port, f"listeners ({config.source('listeners')})")
    if config.get("admin.http.port") >= 0:
        _resolves(config.get("admin.http.host"), config.get("admin.http.port"),
                  f"admin.http.host ({config.source('admin.http.host')})")
    path = os.path.abspath(config.data_dir)
    where = f"data directory {config.data_dir} (log.dirs, {config.source('log.dirs')})"
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if probe and not os.path.isdir(probe):
        what = "is a file" if probe == path else f"cannot be created: {probe} is a file"
        raise StartupError(f"{where} {what}, not a directory")


def _resolves(host: str, port: int, what: str) -> None:
    from .config import StartupError

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise StartupError(f"{what}: host {host!r} does not resolve ({e.strerror})") from None


async def serve(broker: Broker) -> None:
    from .config import StartupError

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except StartupError:
        await _abandon(broker)
        raise
    except Exception as e:  # noqa: BLE001 - any start-up failure is one line, not a traceback
        await _abandon(broker)
        raise StartupError(str(e) or type(e).__name__) from e
    await stop.wait()
    await broker.stop()


async def _abandon(broker: Broker) -> None:
    """Close what a failed start opened, quietly: the start-up error is the one line."""
    try:
        await broker.stop()
    except Exception:  # noqa: BLE001 - half-started; the process is exiting anyway
        pass


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
    from . import acls_cli, groups_cli, topics_cli, transactions_cli, users_cli

    topics_cli.add_parser(sub)
    groups_cli.add_parser(sub)
    transactions_cli.add_parser(sub)
    users_cli.add_parser(sub)
    acls_cli.add_parser(sub)
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
        return _serve(args)
    if args.command == "transactions":
        from .transactions_cli import run

        return run(args)
    if args.command == "topics":
        from .topics_cli import run

        return run(args)
    if args.command == "acls":
        from .acls_cli import run

        return run(args)
    if args.command == "groups":
        from .groups_cli import run

        return run(args)
    if args.command == "users":
        from .users_cli import run

        return run(args)
    return 2


def _serve(args) -> int:
    """Configuration and start-up errors: one line, exit 2. A failure after the broker
    is up (it crashed): exit 1."""
    # A broker never generates test data: start as an installation without the test
    # extra does (kio's hypothesis hooks cost ~0.15 s).
    from txbroker.protocol.kio_import import import_kio_without_hypothesis

    import_kio_without_hypothesis()
    from txbroker.storage.log_config import ConfigError

    from .config import StartupError, load_config
    from .server import Broker

    try:
        config = load_config(config_file=args.config, host=args.host, port=args.port,
                             data_dir=args.data_dir, overrides=dict(args.override))
        preflight(config)
        broker = Broker(config)
    except (ConfigError, StartupError, ValueError, OSError) as e:
        kind = "configuration error" if isinstance(e, ConfigError) else "cannot start"
        print(f"txbroker: {kind}: {e}", file=sys.stderr)
        return 2
    _raise_fd_limit()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(broker))
    except StartupError as e:
        print(f"txbroker: cannot start: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as e:
        print(f"txbroker: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
