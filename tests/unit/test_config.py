"""Broker configuration: properties files, environment, command line, Kafka's fallbacks."""

from __future__ import annotations

import pytest
from txbroker.broker.cli import build_parser, main
from txbroker.broker.config import (
    BROKER_KEYS,
    BrokerConfig,
    env_overrides,
    load_config,
    parse_properties,
)
from txbroker.storage.log_config import ConfigError


def test_parse_properties():
    text = "  log.dirs = /var/lib/txbroker  \n" + """
# a comment
! another comment
num.partitions=3
listeners: PLAINTEXT://0.0.0.0:9093
message.max.bytes=2000=odd
empty.value=
bare.key
"""
    assert parse_properties(text) == {
        "num.partitions": "3",
        "log.dirs": "/var/lib/txbroker",
        "listeners": "PLAINTEXT://0.0.0.0:9093",
        "message.max.bytes": "2000=odd",
        "empty.value": "",
        "bare.key": "",
    }


def test_defaults():
    cfg = load_config(environ={})
    assert cfg.get("num.partitions") == 1
    assert cfg.get("auto.create.topics.enable") is True
    assert cfg.get("socket.request.max.bytes") == 104857600
    assert cfg.listener == ("127.0.0.1", 9092)
    assert cfg.advertised is None
    assert cfg.source("num.partitions") == "default"
    assert cfg.topic_defaults() == {}
    for key in BROKER_KEYS.values():
        key.parse(key.default)  # every default parses


def test_file_env_and_command_line_precedence(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\nlog.retention.hours=1\nnode.id=7\n"
                     "listeners=PLAINTEXT://127.0.0.1:9500\n")
    only_file = load_config(config_file=str(props), environ={})
    assert only_file.get("num.partitions") == 2
    assert only_file.get("node.id") == 7
    assert only_file.source("num.partitions") == f"file {props}"

    env = {"TXBROKER_NUM_PARTITIONS": "3", "TXBROKER_LOG_SEGMENT_BYTES": "1048576",
           "OTHER": "x"}
    with_env = load_config(config_file=str(props), environ=env)
    assert with_env.get("num.partitions") == 3
    assert with_env.source("num.partitions") == "environment"
    assert with_env.topic_defaults()["segment.bytes"] == "1048576"
    assert with_env.get("node.id") == 7  # untouched by the environment

    cli = load_config(config_file=str(props), environ=env, host="0.0.0.0", data_dir="/d",
                      overrides={"num.partitions": "4"})
    assert cli.get("num.partitions") == 4
    assert cli.source("num.partitions") == "command line"
    assert cli.listener == ("0.0.0.0", 9500)  # --host keeps the file's port
    assert cli.data_dir == "/d"
    assert load_config(environ={}, port=0).listener == ("127.0.0.1", 0)


def test_environment_uses_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TXBROKER_NUM_PARTITIONS", "5")
    assert load_config().get("num.partitions") == 5


def test_unknown_environment_names_are_ignored():
    assert env_overrides({"TXBROKER_NOT_A_KEY": "1", "TXBROKER_NODE_ID": "2"}) == {"node.id": "2"}


def test_unknown_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown broker config 'no.such.key'"):
        BrokerConfig({"no.such.key": "1"})
    props = tmp_path / "bad.properties"
    props.write_text("num.partitions=1\nlog.retention.hourz=5\n")
    with pytest.raises(ConfigError, match="log.retention.hourz"):
        load_config(config_file=str(props), environ={})
    with pytest.raises(ConfigError):
        load_config(environ={}, overrides={"segment.bytes": "100"})  # a topic name, not a broker one


@pytest.mark.parametrize("key,value", [
    ("num.partitions", "three"), ("auto.create.topics.enable", "maybe"),
    ("log.segment.bytes", "10"), ("log.retention.ms", "-5"), ("log.cleanup.policy", "keep"),
    ("message.max.bytes", "1e6"),
])
def test_invalid_values_are_rejected_when_set(key, value):
    with pytest.raises(ConfigError):
        BrokerConfig({key: value})


def test_log_retention_fallbacks():
    assert BrokerConfig().raw("log.retention.ms") == str(7 * 24 * 3_600_000)
    hours = BrokerConfig({"log.retention.hours": "2"})
    assert hours.raw("log.retention.ms") == str(2 * 3_600_000)
    assert hours.get("log.retention.ms") == 2 * 3_600_000
    assert hours.topic_defaults() == {"retention.ms": str(2 * 3_600_000)}
    minutes = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert minutes.get("log.retention.ms") == 3 * 60_000
    explicit = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "3",
                             "log.retention.ms": "1234"})
    assert explicit.get("log.retention.ms") == 1234
    assert BrokerConfig({"log.roll.hours": "1"}).get("log.roll.ms") == 3_600_000
    assert BrokerConfig({"log.dir": "/x"}).data_dir == "/x"
    assert BrokerConfig({"log.dir": "/x", "log.dirs": "/y,/z"}).data_dir == "/y"


def test_listeners():
    assert BrokerConfig({"listeners": "PLAINTEXT://:9092"}).listener == ("0.0.0.0", 9092)
    assert BrokerConfig({"listeners": "SSL://h:1,PLAINTEXT://h:2"}).listener == ("h", 2)
    assert BrokerConfig({"listeners": "localhost:9999"}).listener == ("localhost", 9999)
    with pytest.raises(ConfigError):
        _ = BrokerConfig({"listeners": "SSL://h:1"}).listener
    assert BrokerConfig({"advertised.listeners": "PLAINTEXT://kafka:19092"}).advertised == \
        ("kafka", 19092)
    with pytest.raises(ConfigError):
        _ = BrokerConfig({"advertised.listeners": "kafka"}).advertised


def test_cli_rejects_bad_config(capsys):
    assert main(["serve", "--override", "no.such.key=1"]) == 2
    assert "configuration error" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--override", "missing-equals"])


def test_cli_parses_overrides():
    args = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--port", "0",
                                      "--override", "num.partitions = 3",
                                      "--override", "log.retention.hours=1"])
    assert args.override == [("num.partitions", "3"), ("log.retention.hours", "1")]
    cfg = load_config(host=args.host, port=args.port, overrides=dict(args.override), environ={})
    assert cfg.listener == ("0.0.0.0", 0)
    assert cfg.get("num.partitions") == 3
