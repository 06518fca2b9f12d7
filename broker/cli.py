"""Command line: ``txbroker serve --host H --port P --data-dir D [--config FILE]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys

from txbroker.storage.log_config import ConfigError

from .config import load_config
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


async def serve(broker: Broker) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    await stop.wait()
    await broker.stop()


def _parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--override needs key=value, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    from txbroker import __version__

    parser = argparse.ArgumentParser(prog="txbroker", description=__doc__)
    parser.add_argument("--version", action="version", version=f"txbroker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the broker")
    s.add_argument("--host", help="listen address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="listen port (default 9092; 0 = any free port)")
    s.add_argument("--data-dir", help="data directory (log.dirs)")
    s.add_argument("--config", help="Kafka-style properties file")
    s.add_argument("--override", action="append", type=_parse_override, default=[],
                   metavar="KEY=VALUE", help="set any config key (repeatable)")
    s.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    from .transactions_cli import add_parser

    add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, getattr(args, "log_level", "WARNING").upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "serve":
        try:
            config = load_config(config_file=args.config, host=args.host, port=args.port,
                                 data_dir=args.data_dir, overrides=dict(args.override))
        except (ConfigError, OSError) as e:
            print(f"txbroker: configuration error: {e}", file=sys.stderr)
            return 2
        _raise_fd_limit()
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        try:
            asyncio.run(serve(Broker(config)))
        except RuntimeError as e:
            print(f"txbroker: {e}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"txbroker: cannot start: {e}", file=sys.stderr)
            return 1
        return 0
    if args.command == "transactions":
        from .transactions_cli import run

        return run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
