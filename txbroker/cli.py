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
    _add_chaos_parser(sub)
    return parser


def _add_chaos_parser(sub) -> None:
    from txbroker.testing.chaos import events as chaos_events

    c = sub.add_parser(
        "chaos", help="run your pipeline under fire and check it exactly-once",
        description="Start a broker, feed --input with uniquely keyed records, run N "
                    "instances of COMMAND (TXBROKER_BOOTSTRAP, TXBROKER_INSTANCE, "
                    "TXBROKER_INSTANCES, TXBROKER_INPUT, TXBROKER_OUTPUT, TXBROKER_GROUP in "
                    "their environment), SIGKILL and restart them, pause one and resume it "
                    "beside its replacement (a zombie), crash the broker (SIGKILL, power "
                    "loss), restart it cleanly, hang it, inject request faults, then check "
                    "--output (docs/testing-your-pipeline.md). Exits 1 on any anomaly or "
                    "stall.")
    c.add_argument("--input", required=True, help="input topic (created if missing)")
    c.add_argument("--output", help="output topic (created if missing; not with --share)")
    c.add_argument("--share", action="store_true",
                   help="COMMAND is a share-group worker (KIP-932): N workers share "
                        "TXBROKER_GROUP, write what they received and ACCEPTed into "
                        "TXBROKER_HISTORY, and the checker reports lost records, double "
                        "accepts and deliveries after an accept (docs/testing-your-"
                        "pipeline.md); no --output")
    c.add_argument("--instances", type=int, default=2, help="pipeline instances (default: 2)")
    c.add_argument("--duration", type=float, default=60, help="seconds of faults (default: 60)")
    c.add_argument("--records", type=int, default=2000, help="input records (default: 2000)")
    c.add_argument("--partitions", type=int, default=2,
                   help="partitions of topics it creates (default: 2)")
    c.add_argument("--group",
                   help="the pipeline's consumer group, whose offsets are checked "
                        "(default: chaos-pipeline; chaos-workers with --share; also in "
                        "TXBROKER_GROUP)")
    c.add_argument("--interval", type=float, default=2.0,
                   help="mean seconds between faults (default: 2)")
    c.add_argument("--faults", default="default", help="request-fault profile: default, lost_answers (Produce and EndTxn answers dropped; with --share: ShareFetch and ShareAcknowledge answers), none")
    c.add_argument("--no-broker-crashes", action="store_true",
                   help="no broker crashes (SIGKILL, then start)")
    c.add_argument("--no-power-loss", action="store_true",
                   help="no power losses (at a commit-protocol point, unsynced data lost)")
    chaos_events.add_options(c)
    c.add_argument("--no-order", action="store_true",
                   help="the pipeline does not keep per-partition order: do not check it")
    c.add_argument("--stall-timeout", type=float, default=60,
                   help="seconds without progress that make a stall (default: 60)")
    c.add_argument("--seed", type=int, help="random seed of the fault schedule")
    c.add_argument("--generator", metavar="CMD",
                   help="your command that feeds --input instead of the built-in feeder "
                        "(one string, split like a shell; done when it exits 0); the input "
                        "is then learnt by reading --input back")
    c.add_argument("--mapping", default="key",
                   help="which input an output record came from: key (default: the output "
                        "key is the input key), header:NAME (a header holding the input's "
                        "topic-partition-offset), python:MODULE:FUNCTION (a callable from a "
                        "record to its input's id)")
    c.add_argument("--data-dir", help="where the broker and instance logs go (default: a "
                                      "temporary directory)")
    c.add_argument("pipeline", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the pipeline command, after --")


def _run_chaos(args) -> int:
    from txbroker.chaos import run
    from txbroker.testing.chaos import events as chaos_events

    command = args.pipeline[1:] if args.pipeline[:1] == ["--"] else args.pipeline
    if not command:
        print("txbroker chaos: give the pipeline command after --", file=sys.stderr)
        return 2
    import signal

    def terminate(signum, frame):  # clean up (instances, broker) as after Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    if args.share:
        return _run_share_chaos(args, command)
    if not args.output:
        print("txbroker chaos: --output is required (or --share)", file=sys.stderr)
        return 2
    from txbroker.testing.chaos.mapping import parse_mapping

    try:
        mapping = parse_mapping(args.mapping)
    except ValueError as e:
        print(f"txbroker chaos: --mapping: {e}", file=sys.stderr)
        return 2
    report = run(command, input=args.input, output=args.output, instances=args.instances,
                 duration=args.duration, records=args.records, partitions=args.partitions,
                 group=args.group or "chaos-pipeline", interval=args.interval,
                 faults=args.faults,
                 broker_crashes=not args.no_broker_crashes, power_loss=not args.no_power_loss,
                 check_order=not args.no_order, stall_timeout=args.stall_timeout,
                 seed=args.seed, data_dir=args.data_dir, generator=args.generator,
                 mapping=mapping, **chaos_events.options(args))
    print(report.text())
    return 0 if report.ok else 1


def _run_share_chaos(args, command: list[str]) -> int:
    from txbroker.chaos import run_share
    from txbroker.testing.chaos import events as chaos_events

    report = run_share(command, input=args.input, instances=args.instances,
                       duration=args.duration, records=args.records,
                       partitions=args.partitions, group=args.group or "chaos-workers",
                       interval=args.interval, faults=args.faults,
                       broker_crashes=not args.no_broker_crashes,
                       power_loss=not args.no_power_loss, stall_timeout=args.stall_timeout,
                       seed=args.seed, data_dir=args.data_dir, **chaos_events.options(args))
    print(report.text())
    return 0 if report.ok else 1


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
        # Loading the broker's modules allocates some 50,000 objects that live as long
        # as the process (modules, classes, functions) and hardly any garbage: no
        # collection passes over them while they are made (~5% of the start-up's CPU).
        # broker/main.py freezes them and turns the collector back on.
        import gc

        gc.disable()
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
    if args.command == "chaos":
        return _run_chaos(args)
    if args.command == "faults":
        from txbroker.tools.faults import run

        return run(args)
    return 2
