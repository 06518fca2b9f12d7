"""The broker process: ``txbroker serve``'s start-up (configuration, preflight checks,
the file descriptor limit, uvloop), signals (SIGTERM and SIGINT stop it cleanly) and
its exit status. The command line that leads here is txbroker/cli.py, which parses
``serve``'s options and calls ``run`` without importing the tools."""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import signal
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on use (run): --help and the tools do not load the broker
    from .config import BrokerConfig
    from .server import Broker

def _raise_fd_limit() -> None:
    # Every segment keeps its file open; take the hard limit like Kafka's scripts advise.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


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


def run(args) -> int:
    """Configuration and start-up errors: one line, exit 2. A failure after the broker
    is up (it crashed): exit 1."""
    # A broker never generates test data: start as an installation without the test
    # extra does (kio's hypothesis hooks cost ~0.15 s).
    from txbroker.protocol.kio_import import import_kio_without_hypothesis

    import_kio_without_hypothesis()
    from txbroker.storage.log_config import ConfigError

    from .config import StartupError, load_config
    from .server import Broker

    # The modules are loaded, and live as long as the process: out of the collector's
    # sight (gc.freeze moves them at no cost), so that no collection ever walks them.
    # txbroker/cli.py turned the collector off while they loaded.
    gc.freeze()
    gc.enable()

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
    # uvloop's loop where it is installed, passed as the runner's loop factory
    # (uvloop.install() sets a global policy: deprecated from Python 3.12).
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(broker))
    except StartupError as e:
        print(f"txbroker: cannot start: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as e:
        print(f"txbroker: {e}", file=sys.stderr)
        return 1
    return 0

