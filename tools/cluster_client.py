"""What the Kafka-style admin tools (``txbroker topics|groups ...``) share: client
options, a cluster view that sends each request to the broker Kafka routes it to
(partition leaders for ListOffsets, the group coordinator for group requests), and
table output. Standard Kafka APIs only, so the tools work against Apache Kafka too."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as fc
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.metadata.v12 import request as md
from txbroker.client.security import SecurityError

from .admin_client import COMMAND_CONFIG_HELP, AdminConnection, bootstrap_connection

OUT = sys.stdout  # tests swap it for a buffer

EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def echo(*parts: object) -> None:
    """print(), to ``OUT`` (what a command shows)."""
    print(*parts, file=OUT)


class ToolError(Exception):
    """A failure to report in one line (exit status 1)."""


def error_name(code: ErrorCode) -> str:
    return code.name.upper()


def add_client_options(parser: argparse.ArgumentParser, *, subcommand: bool = False) -> None:
    """--bootstrap-server and --command-config. Given to the tool and to each of its
    subcommands (``subcommand=True``), so that they may come anywhere, as Kafka's
    scripts take them; a subcommand's copy only sets the value when it is given."""
    default = argparse.SUPPRESS if subcommand else None
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", default=default,
                        help="host:port[,host:port] (default: bootstrap.servers of "
                             "--command-config, else 127.0.0.1:9092)")
    parser.add_argument("--command-config", metavar="FILE", default=default,
                        help=COMMAND_CONFIG_HELP)


def add_client_options_to_subcommands(*parsers: argparse.ArgumentParser) -> None:
    for parser in parsers:
        add_client_options(parser, subcommand=True)


def table(rows: Iterable[list[Any]], header: list[str]) -> None:
    rows = [[("-" if v is None else v) for v in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)).rstrip(),
              file=OUT)


class Cluster:
    """Connections to a cluster, opened as requests need them."""

    def __init__(self, bootstrap: AdminConnection, timeout: float) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.brokers: dict[int, str] = {}
        self._conns: dict[int, AdminConnection] = {}
        self._coordinators: dict[str, int] = {}

    def metadata(self, topics: Iterable[str] | None = None):
        names = None if topics is None else tuple(
            md.MetadataRequestTopic(topic_id=None, name=t) for t in topics)
        resp = self.bootstrap.request(3, 12, md.MetadataRequest(
            topics=names, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
        return resp

    def node(self, node_id: int) -> AdminConnection:
        """The connection to broker ``node_id`` (the bootstrap one when it is that broker,
        or the only one: a single broker may advertise a name only others resolve)."""
        if not self.brokers:
            self.metadata([])
        address = self.brokers.get(node_id)
        if address is None or address == self.bootstrap.address or len(self.brokers) == 1:
            return self.bootstrap
        if node_id not in self._conns:
            try:
                self._conns[node_id] = AdminConnection(address, self.timeout,
                                                       self.bootstrap.security)
            except (OSError, SecurityError) as e:
                raise ToolError(f"cannot reach broker {node_id} at {address}: {e}") from None
        return self._conns[node_id]

    def coordinator(self, group: str) -> AdminConnection:
        if group not in self._coordinators:
            resp = self.bootstrap.request(10, 3, fc.FindCoordinatorRequest(key=group, key_type=0))
            if resp.error_code != ErrorCode.none:
                raise ToolError(f"cannot find the coordinator of group {group!r}: "
                                f"{error_name(resp.error_code)}")
            self.brokers.setdefault(resp.node_id, f"{resp.host}:{resp.port}")
            self._coordinators[group] = resp.node_id
        return self.node(self._coordinators[group])

    def coordinator_id(self, group: str) -> int:
        self.coordinator(group)
        return self._coordinators[group]

    def partitions(self, topics: Iterable[str] | None = None) -> dict[str, dict[int, int]]:
        """topic -> {partition: leader id}; unknown topics are an error."""
        resp = self.metadata(topics)
        out: dict[str, dict[int, int]] = {}
        for t in resp.topics:
            if t.error_code != ErrorCode.none:
                raise ToolError(f"topic {t.name!r}: {error_name(t.error_code)}")
            out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
        return out

    def list_offsets(self, wanted: dict[tuple[str, int], int], isolation: int = READ_UNCOMMITTED,
                     leaders: dict[str, dict[int, int]] | None = None) -> dict[tuple[str, int], int]:
        """(topic, partition) -> timestamp (or EARLIEST/LATEST) => offset (-1: none),
        each partition asked of its leader."""
        if not wanted:
            return {}
        if leaders is None:
            leaders = self.partitions(sorted({t for t, _ in wanted}))
        by_leader: dict[int, dict[str, list[lo.ListOffsetsPartition]]] = {}
        for (topic, partition), timestamp in sorted(wanted.items()):
            leader = leaders.get(topic, {}).get(partition)
            if leader is None:
                raise ToolError(f"{topic}-{partition}: no such partition")
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                lo.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                        timestamp=timestamp))
        out = {}
        for leader, topics in by_leader.items():
            resp = self.node(leader).request(2, 7, lo.ListOffsetsRequest(
                replica_id=-1, isolation_level=isolation, topics=tuple(
                    lo.ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())))
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise ToolError(f"ListOffsets {t.name}-{p.partition_index}: "
                                        f"{error_name(p.error_code)}")
                    out[(t.name, p.partition_index)] = p.offset
        return out

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self.bootstrap.close()


def run_tool(args, commands: dict[str, Any], command: str) -> int:
    """Connect as --bootstrap-server/--command-config say and run ``commands[command]``:
    errors are one line on stderr (exit 1)."""
    bootstrap = bootstrap_connection(args)
    if bootstrap is None:
        return 1
    cluster = Cluster(bootstrap, bootstrap.timeout)
    try:
        return commands[command](cluster, args)
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except SecurityError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: connection to the cluster failed: {e}", file=sys.stderr)
        return 1
    finally:
        cluster.close()
