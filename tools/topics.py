"""``txbroker topics create|list|describe|alter|delete``: kafka-topics.sh's commands and
option names, over the Kafka protocol (Metadata, CreateTopics, CreatePartitions,
DeleteTopics, DescribeConfigs, IncrementalAlterConfigs, ListOffsets).

describe also shows, per partition, the high watermark and the last stable offset
(what read_committed consumers can read up to), which Kafka's tool does not.
"""

from __future__ import annotations

import argparse
import datetime

from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_topics.v7 import request as ct
from kio.schema.delete_topics.v5 import request as dt
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac

from .cluster_client import (
    LATEST,
    READ_COMMITTED,
    Cluster,
    ToolError,
    add_client_options,
    add_client_options_to_subcommands,
    echo,
    error_name,
    run_tool,
)

_TIMEOUT = datetime.timedelta(seconds=30)
_TOPIC_RESOURCE = 2
_DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' source of a topic's own (non-default) value
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations


def _configs(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for item in pairs or ():
        if "=" not in item:
            raise ToolError(f"--config needs key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _topic_names(cluster: Cluster, exclude_internal: bool) -> list[str]:
    resp = cluster.metadata(None)
    return sorted(t.name for t in resp.topics
                  if t.error_code == ErrorCode.none and not (exclude_internal and t.is_internal))


def cmd_create(cluster: Cluster, args) -> int:
    configs = _configs(args.config)
    resp = cluster.bootstrap.request(19, 7, ct.CreateTopicsRequest(
        topics=(ct.CreatableTopic(
            name=args.topic, num_partitions=args.partitions or -1,
            replication_factor=args.replication_factor or -1, assignments=(),
            configs=tuple(ct.CreatableTopicConfig(name=k, value=v) for k, v in configs.items())),),
        timeout=_TIMEOUT, validate_only=False))
    [result] = resp.topics
    if result.error_code == ErrorCode.topic_already_exists and args.if_not_exists:
        return 0
    if result.error_code != ErrorCode.none:
        raise ToolError(f"cannot create topic {args.topic!r}: {error_name(result.error_code)}"
                        + (f" ({result.error_message})" if result.error_message else ""))
    echo(f"Created topic {args.topic}.")
    return 0


def cmd_list(cluster: Cluster, args) -> int:
    for name in _topic_names(cluster, args.exclude_internal):
        echo(name)
    return 0


def _dynamic_configs(cluster: Cluster, topics: list[str]) -> dict[str, dict[str, str]]:
    if not topics:
        return {}
    resp = cluster.bootstrap.request(32, 4, dc.DescribeConfigsRequest(
        resources=tuple(dc.DescribeConfigsResource(resource_type=_TOPIC_RESOURCE,
                                                   resource_name=t, configuration_keys=None)
                        for t in topics),
        include_synonyms=False, include_documentation=False))
    out = {}
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            raise ToolError(f"cannot describe the configs of {r.resource_name!r}: "
                            f"{error_name(r.error_code)}")
        out[r.resource_name] = {c.name: c.value for c in r.configs
                                if c.config_source == _DYNAMIC_TOPIC_CONFIG}
    return out


def cmd_describe(cluster: Cluster, args) -> int:
    topics = args.topic or _topic_names(cluster, args.exclude_internal)
    resp = cluster.metadata(topics)
    found = []
    for t in sorted(resp.topics, key=lambda t: t.name):
        if t.error_code != ErrorCode.none:
            if args.topic:
                raise ToolError(f"topic {t.name!r}: {error_name(t.error_code)}")
            continue
        found.append(t)
    configs = _dynamic_configs(cluster, [t.name for t in found])
    leaders = {t.name: {p.partition_index: p.leader_id for p in t.partitions} for t in found}
    every = {(t.name, p.partition_index): LATEST for t in found for p in t.partitions}
    high_watermarks = cluster.list_offsets(every, leaders=leaders)
    stable = cluster.list_offsets(every, READ_COMMITTED, leaders=leaders)
    for t in found:
        replication = len(t.partitions[0].replica_nodes) if t.partitions else 0
        config_text = ",".join(f"{k}={v}" for k, v in sorted(configs.get(t.name, {}).items()))
        echo(f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
             f"ReplicationFactor: {replication}\tConfigs: {config_text}")
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            tp = (t.name, p.partition_index)
            echo(f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                 f"Replicas: {','.join(map(str, p.replica_nodes))}\t"
                 f"Isr: {','.join(map(str, p.isr_nodes))}\t"
                 f"HighWatermark: {high_watermarks[tp]}\tLastStableOffset: {stable[tp]}")
    return 0


def cmd_alter(cluster: Cluster, args) -> int:
    configs = _configs(args.config)
    if args.partitions is None and not configs and not args.delete_config:
        raise ToolError("alter needs --partitions, --config or --delete-config")
    if args.partitions is not None:
        resp = cluster.bootstrap.request(37, 3, cp.CreatePartitionsRequest(
            topics=(cp.CreatePartitionsTopic(name=args.topic, count=args.partitions,
                                             assignments=None),),
            timeout=_TIMEOUT, validate_only=False))
        [result] = resp.results
        if result.error_code != ErrorCode.none:
            raise ToolError(f"cannot alter the partitions of {args.topic!r}: "
                            f"{error_name(result.error_code)}"
                            + (f" ({result.error_message})" if result.error_message else ""))
    if configs or args.delete_config:
        changes = [iac.AlterableConfig(name=k, config_operation=_SET, value=v)
                   for k, v in configs.items()]
        changes += [iac.AlterableConfig(name=k, config_operation=_DELETE, value=None)
                    for k in args.delete_config or ()]
        resp = cluster.bootstrap.request(44, 1, iac.IncrementalAlterConfigsRequest(
            resources=(iac.AlterConfigsResource(resource_type=_TOPIC_RESOURCE,
                                                resource_name=args.topic,
                                                configs=tuple(changes)),),
            validate_only=False))
        [result] = resp.responses
        if result.error_code != ErrorCode.none:
            raise ToolError(f"cannot alter the configs of {args.topic!r}: "
                            f"{error_name(result.error_code)}"
                            + (f" ({result.error_message})" if result.error_message else ""))
    echo(f"Altered topic {args.topic}.")
    return 0


def cmd_delete(cluster: Cluster, args) -> int:
    resp = cluster.bootstrap.request(20, 5, dt.DeleteTopicsRequest(
        topic_names=(args.topic,), timeout=_TIMEOUT))
    [result] = resp.responses
    if result.error_code == ErrorCode.unknown_topic_or_partition and args.if_exists:
        return 0
    if result.error_code != ErrorCode.none:
        raise ToolError(f"cannot delete topic {args.topic!r}: {error_name(result.error_code)}")
    echo(f"Deleted topic {args.topic}.")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("topics", help="manage topics, like kafka-topics.sh",
                       description=__doc__.replace("``", ""), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_client_options(p)
    tsub = p.add_subparsers(dest="topics_command", required=True)
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, help="(default: the broker's num.partitions)")
    c.add_argument("--replication-factor", type=int,
                   help="(default: the broker's default.replication.factor)")
    c.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="a topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true",
                   help="succeed when the topic exists already")
    ls = tsub.add_parser("list", help="topic names, one a line")
    ls.add_argument("--exclude-internal", action="store_true",
                    help="leave out __consumer_offsets and __transaction_state")
    d = tsub.add_parser("describe", help="partitions, leaders, configs set on the topic, "
                                         "high watermark and last stable offset per partition")
    d.add_argument("--topic", action="append", help="(repeatable; default: every topic)")
    d.add_argument("--exclude-internal", action="store_true")
    a = tsub.add_parser("alter", help="add partitions, set or delete topic configs")
    a.add_argument("--topic", required=True)
    a.add_argument("--partitions", type=int, help="the new (larger) partition count")
    a.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="set a topic config (repeatable)")
    a.add_argument("--delete-config", action="append", metavar="KEY",
                   help="back to the broker default (repeatable)")
    rm = tsub.add_parser("delete", help="delete a topic")
    rm.add_argument("--topic", required=True)
    rm.add_argument("--if-exists", action="store_true", help="succeed when there is no such topic")
    add_client_options_to_subcommands(c, ls, d, a, rm)


def run(args) -> int:
    commands = {"create": cmd_create, "list": cmd_list, "describe": cmd_describe,
                "alter": cmd_alter, "delete": cmd_delete}
    return run_tool(args, commands, args.topics_command)

