"""Broker configuration: properties files, environment, command line, Kafka's fallbacks."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from txbroker.broker.config import BROKER_KEYS, BrokerConfig, env_overrides, load_config
from txbroker.broker.server import Broker
from txbroker.protocol.properties import parse_properties, parse_properties_lines
from txbroker.storage.log_config import ConfigError

from txbroker.cli import build_parser, main


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
    assert only_file.source("num.partitions") == f"{props} line 1"

    env = {"TXBROKER_NUM_PARTITIONS": "3", "TXBROKER_LOG_SEGMENT_BYTES": "1048576",
           "OTHER": "x", "TXBROKER_SOURCE_TEST_READ_DELAY": "1"}
    with_env = load_config(config_file=str(props), environ=env)
    assert with_env.get("num.partitions") == 3
    assert with_env.source("num.partitions") == "environment variable TXBROKER_NUM_PARTITIONS"
    assert with_env.topic_defaults()["segment.bytes"] == "1048576"
    assert with_env.get("node.id") == 7  # untouched by the environment

    cli = load_config(config_file=str(props), environ=env, host="0.0.0.0", data_dir="/d",
                      overrides={"num.partitions": "4"})
    assert cli.get("num.partitions") == 4
    assert cli.source("num.partitions") == "--override num.partitions=4"
    assert cli.source("listeners") == "--host"
    assert cli.source("log.dirs") == "--data-dir"
    assert cli.listener == ("0.0.0.0", 9500)  # --host keeps the file's port
    assert cli.data_dir == "/d"
    assert load_config(environ={}, port=0).listener == ("127.0.0.1", 0)


def test_environment_uses_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TXBROKER_NUM_PARTITIONS", "5")
    assert load_config().get("num.partitions") == 5


def test_mistyped_environment_variables_are_refused():
    assert env_overrides({"TXBROKER_NODE_ID": "2", "TXBROKER_SOURCE_TEST_READ_MARKER": "m",
                          "PATH": "/bin"}) == {"node.id": "2"}
    with pytest.raises(ConfigError, match="TXBROKER_NOT_A_KEY, TXBROKER_NUM_PARTITION"):
        load_config(environ={"TXBROKER_NUM_PARTITION": "3", "TXBROKER_NOT_A_KEY": "1"})


def test_unknown_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown broker config 'no.such.key' \\(override\\)"):
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
    assert BrokerConfig({"listeners": "SSL://h:1"}).listener == ("h", 1)  # no PLAINTEXT: the first
    specs = BrokerConfig({"listeners": "PLAINTEXT://:1,EXTERNAL://h:2,CONTROLLER://:3",
                          "controller.listener.names": "CONTROLLER",
                          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_SSL",
                          "advertised.listeners": "EXTERNAL://kafka.example:9094"}).listener_specs()
    assert [(s.name, s.host, s.port, s.security_protocol, s.advertised) for s in specs] == [
        ("PLAINTEXT", "0.0.0.0", 1, "PLAINTEXT", None),
        ("EXTERNAL", "h", 2, "SASL_SSL", ("kafka.example", 9094))]
    with pytest.raises(ConfigError, match="EXTERNAL.*listener.security.protocol.map"):
        BrokerConfig({"listeners": "EXTERNAL://h:1"}).listener_specs()
    with pytest.raises(ConfigError, match="security protocol must be one of"):
        BrokerConfig({"listener.security.protocol.map": "X:TLS"})
    with pytest.raises(ConfigError, match="appears twice"):
        BrokerConfig({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"})
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


# --- Kafka's server.properties, and errors that say what and where (issue 19) -------------

KAFKA4_PROPERTIES = Path(__file__).resolve().parents[2] / "fixtures" / "kafka4-server.properties"

# The keys of the stock file that mean nothing on a single broker.
KAFKA4_IGNORED = {
    "process.roles", "controller.quorum.bootstrap.servers", "inter.broker.listener.name",
    "num.network.threads",
    "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir", "offsets.topic.replication.factor",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
}


def test_kafka4_server_properties_starts_the_broker_with_one_warning(tmp_path, caplog):
    keys = [k for k, _, _ in parse_properties_lines(KAFKA4_PROPERTIES.read_text())]
    assert len(keys) == len(set(keys)) == 24
    caplog.set_level(logging.WARNING, logger="txbroker.config")
    cfg = load_config(config_file=str(KAFKA4_PROPERTIES), data_dir=str(tmp_path / "d"),
                      port=0, environ={})
    warnings = [r.getMessage() for r in caplog.records if r.name == "txbroker.config"]
    assert len(warnings) == 1
    assert all(key in warnings[0] for key in KAFKA4_IGNORED)
    assert set(cfg.ignored) == KAFKA4_IGNORED
    assert set(cfg.values) | set(cfg.ignored) == set(keys)
    assert cfg.listener == ("0.0.0.0", 0)  # the PLAINTEXT listener, not CONTROLLER
    assert cfg.advertised == ("localhost", 9092)
    assert cfg.source("log.retention.hours") == f"{KAFKA4_PROPERTIES} line 35"

    async def start_and_stop():
        broker = Broker(cfg)
        await broker.start()
        assert broker.port > 0
        await broker.stop()

    asyncio.run(start_and_stop())


def test_unknown_keys_are_listed_in_one_error_with_where_they_came_from(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("process.roles=broker\nno.such.key=1\n# comment\nlog.retention.hourz=5\n")
    with pytest.raises(ConfigError) as e:
        load_config(config_file=str(props), environ={}, overrides={"other.key": "x"})
    assert str(e.value) == (
        f"unknown broker configs 'no.such.key' ({props} line 2), "
        f"'log.retention.hourz' ({props} line 4), 'other.key' (--override other.key=x)")


@pytest.mark.parametrize("kwargs,message", [
    ({"overrides": {"num.partitions": "abc"}},
     "num.partitions=abc (--override num.partitions=abc): 'abc' is not an integer"),
    ({"environ": {"TXBROKER_NUM_PARTITIONS": "abc"}},
     "num.partitions=abc (environment variable TXBROKER_NUM_PARTITIONS): "
     "'abc' is not an integer"),
    ({"file": "log.dirs=/x\nnum.partitions=abc\n"},
     "num.partitions=abc ({file} line 2): 'abc' is not an integer"),
    ({"port": 99999}, "--port 99999 is outside [0, 65535]"),
    ({"overrides": {"listeners": "EXTERNAL://h:9093"}}, "is not in listener.security.protocol.map"),
    ({"overrides": {"listeners": "PLAINTEXT://h:123456"}}, "not a number in [0, 65535]"),
    ({"overrides": {"advertised.listeners": "localhost"}},
     "advertised.listeners=localhost (--override advertised.listeners=localhost): "
     "'localhost' needs host:port"),
    ({"overrides": {"txbroker.fault.points": "nowhere=crash"}}, "unknown fault point 'nowhere'"),
    ({"overrides": {"txbroker.fault.points": "before_complete=explode"}},
     "unknown fault action 'explode'"),
    ({"overrides": {"admin.http.port": "70000"}}, "admin.http.port=70000"),
    ({"overrides": {"queued.max.request.bytes": "10"}},
     "queued.max.request.bytes=10 (--override queued.max.request.bytes=10) must be -1 or at "
     "least socket.request.max.bytes=104857600 (default)"),
])
def test_value_errors_name_the_key_and_the_source(tmp_path, kwargs, message):
    kwargs.setdefault("environ", {})
    file = tmp_path / "server.properties"
    if "file" in kwargs:
        file.write_text(kwargs.pop("file"))
        kwargs["config_file"] = str(file)
    with pytest.raises(ConfigError) as e:
        load_config(**kwargs)
    assert message.format(file=file) in str(e.value)
    assert "\n" not in str(e.value)


def _cli(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("argv,message", [
    (["--override", "num.partitions=abc"], "configuration error: num.partitions=abc"),
    (["--port", "99999"], "--port 99999 is outside [0, 65535]"),
    (["--override", "listeners=SSL://localhost:9093"], "JKS key stores are not supported"),
    (["--override", "advertised.listeners=localhost"], "needs host:port"),
    (["--override", "txbroker.fault.points=nowhere"], "unknown fault point"),
    (["--override", "txbroker.fault.points=before_complete=boom"], "unknown fault action"),
    (["--log-level", "verbose"], "--log-level 'verbose' is not one of DEBUG, INFO"),
    (["--host", "no-such-host.invalid"],
     "cannot start: listeners (--host): host 'no-such-host.invalid' does not resolve"),
    (["--override", "admin.http.port=0", "--override", "admin.http.host=nowhere.invalid"],
     "admin.http.host (--override admin.http.host=nowhere.invalid): host 'nowhere.invalid' "
     "does not resolve"),
])
def test_cli_configuration_errors_exit_2_with_one_line(tmp_path, capsys, argv, message):
    code, err = _cli(["serve", "--data-dir", str(tmp_path / "d"), *argv], capsys)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_mistyped_environment_variable_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TXBROKER_NUM_PARTITON", "3")
    code, err = _cli(["serve", "--data-dir", str(tmp_path)], capsys)
    assert code == 2
    assert "unknown environment variable TXBROKER_NUM_PARTITON" in err


def test_cli_data_dir_that_is_a_file(tmp_path, capsys):
    file = tmp_path / "data"
    file.write_text("")
    code, err = _cli(["serve", "--port", "0", "--data-dir", str(file)], capsys)
    assert code == 2
    assert err == (f"txbroker: cannot start: data directory {file} (log.dirs, --data-dir) is a "
                   "file, not a directory\n")
    code, err = _cli(["serve", "--port", "0", "--data-dir", str(file / "sub")], capsys)
    assert code == 2
    assert f"cannot be created: {file} is a file" in err


@pytest.mark.parametrize("which", ["listeners", "admin"])
def test_cli_port_clash_names_the_listener(tmp_path, capsys, which):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if which == "listeners":
            argv = ["--port", str(port)]
            want = (f"cannot start: cannot listen on 127.0.0.1:{port} (listener PLAINTEXT, "
                    f"listeners, --port)")
        else:
            argv = ["--port", "0", "--override", f"admin.http.port={port}"]
            want = (f"cannot start: admin HTTP endpoint cannot listen on 127.0.0.1:{port} "
                    f"(admin.http.port, --override admin.http.port={port})")
        code, err = _cli(["serve", "--data-dir", str(tmp_path / "d"), *argv], capsys)
    assert code == 2
    assert want in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_config_error_in_a_real_process_is_one_line(tmp_path):
    checkout = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXBROKER_")}
    proc = subprocess.run(
        [sys.executable, "-m", "txbroker", "serve", "--data-dir", str(tmp_path),
         "--override", "txbroker.fault.points=nowhere"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("txbroker: configuration error")


def test_serve_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps lines, even at hyphens
    for default in ("(default: INFO)", "(default: ./txbroker-data)",
                    "(default: the listeners port, 9092)", "(default: the listeners host, 127.0.0.1)"):
        assert "".join(default.split()) in out


def test_cli_data_dir_in_use_by_another_broker(tmp_path, capsys):
    from txbroker.testing import BrokerThread

    with BrokerThread(str(tmp_path / "d")):
        code, err = _cli(["serve", "--port", "0", "--data-dir", str(tmp_path / "d")], capsys)
    assert code == 2
    assert "cannot start:" in err and "in use by another broker" in err
    assert err.count("\n") == 1
