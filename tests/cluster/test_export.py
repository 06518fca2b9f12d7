"""ACLs and SCRAM users moved from txbroker to Apache Kafka (issue 30, item 4).

``txbroker acls export`` and ``txbroker users export`` print shell scripts of
kafka-acls.sh / kafka-configs.sh commands; they run here as written, with those two
names bound to Kafka's own AclCommand and ConfigCommand (the classes the scripts run,
from the pinned jars), against a Kafka with the StandardAuthorizer and a SCRAM
listener. Both brokers then list the same ACLs and decide alike, and the exported users
log in to Kafka, with the passwords the operator supplies (SCRAM storage keeps no
password: docs/migrating-to-kafka.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaException

from testing.broker_process import BrokerProcess
from tests.kafka_reference import KafkaProcess, jars_available, jars_dir

pytestmark = pytest.mark.cluster

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0"}
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PASSWORD = "alice-secret"
BOB = "bob-secret"
ACLS = [  # txbroker acls --add arguments
    ["--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
     "--topic", "orders"],
    ["--allow-principal", "User:alice", "--operation", "Read", "--group", "billing-",
     "--resource-pattern-type", "prefixed"],
    ["--deny-principal", "User:mallory", "--deny-host", "10.0.0.1", "--operation", "All",
     "--topic", "*"],
    ["--allow-principal", "User:alice", "--operation", "Write", "--operation",
     "Describe", "--transactional-id", "pay-", "--resource-pattern-type", "prefixed"],
    ["--allow-principal", "User:ops", "--operation", "IdempotentWrite",
     "--operation", "DescribeConfigs", "--cluster"],
]


def _txbroker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txbroker", *args], capture_output=True,
                          text=True, timeout=60)


def _listed(bootstrap: str) -> str:
    """``acls --list`` of everything, the same text for either broker."""
    done = _txbroker("acls", "--list", "--bootstrap-server", bootstrap)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _run_script(script: str, env: dict[str, str] | None = None) -> None:
    """Run an exported script, kafka-acls.sh and kafka-configs.sh being Kafka's tools."""
    java = (f"nice -n 10 java -Xmx128m -XX:TieredStopAtLevel=1 -cp '{jars_dir()}/*'")
    prelude = (f"kafka-acls.sh() {{ {java} org.apache.kafka.tools.AclCommand \"$@\"; }}\n"
               f"kafka-configs.sh() {{ {java} org.apache.kafka.tools.ConfigCommand \"$@\"; }}\n")
    done = subprocess.run(["bash", "-c", prelude + script], capture_output=True, text=True,
                          timeout=300, env={"PATH": os.environ["PATH"], **(env or {})})
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"


def _read_error(bootstrap: str, topic: str, user: str = "alice", password: str = PASSWORD,
                mechanism: str = "SCRAM-SHA-256") -> str | None:
    """``user`` over SCRAM reads ``topic``: None, or the error's name."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": password, "group.id": "billing-eu",
                         "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        return None if meta.error is None else meta.error.name()
    except KafkaException as e:
        return e.args[0].name()
    finally:
        consumer.close()


def test_acls_export_recreates_them_on_kafka(tmp_path):
    if not jars_available():
        pytest.skip(f"no Kafka jars in {jars_dir()}: run `make kafka-jars`")
    source = BrokerProcess(str(tmp_path / "txbroker"), AUTHORIZER,
                           listeners=["PLAINTEXT", "SASL_PLAINTEXT"],
                           users={"alice": PASSWORD},
                           sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"))
    kafka = KafkaProcess(
        tmp_path / "kafka",
        {**AUTHORIZER, "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
         "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
             f"{SCRAM_MODULE} required;",
         "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
             f"{SCRAM_MODULE} required;"},
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        scram=[f"SCRAM-SHA-256=[name=alice,password={PASSWORD}]"], heap="384m", nice=10)
    source.start()
    try:
        kafka.start()
        plain = source.bootstrap_for("PLAINTEXT")
        for args in ACLS:
            done = _txbroker("acls", "--add", "--bootstrap-server", plain, *args)
            assert done.returncode == 0, done.stderr
        for broker in (plain, kafka.bootstrap):
            for topic in ("orders", "ledger"):
                done = _txbroker("topics", "create", "--topic", topic, "--bootstrap-server",
                                 broker)
                assert done.returncode == 0, done.stderr

        exported = _txbroker("acls", "export", "--bootstrap-server", plain,
                             "--target-bootstrap-server", kafka.bootstrap)
        assert exported.returncode == 0, exported.stderr
        lines = [line for line in exported.stdout.splitlines()
                 if line.startswith("kafka-acls.sh ")]
        assert len(lines) == len(ACLS)
        _run_script(exported.stdout)

        assert _listed(kafka.bootstrap) == _listed(plain)
        # The same decisions: orders readable by alice, ledger not, on both.
        for broker in (source.bootstrap_for("SASL_PLAINTEXT"), kafka.ports["SASL_PLAINTEXT"]):
            bootstrap = broker if isinstance(broker, str) else f"{kafka.host}:{broker}"
            assert _read_error(bootstrap, "orders") is None
            assert _read_error(bootstrap, "ledger") == "TOPIC_AUTHORIZATION_FAILED"

        # Users: bob exists on txbroker only; the export recreates him on Kafka.
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            done = _txbroker("users", "add", "bob", "--mechanism", mech, "--iterations", "8192",
                             "--password", BOB, "--bootstrap-server", plain)
            assert done.returncode == 0, done.stderr
        users = _txbroker("users", "export", "--bootstrap-server", plain,
                          "--target-bootstrap-server", kafka.bootstrap)
        assert users.returncode == 0, users.stderr
        assert BOB not in users.stdout and "# PASSWORD_2: bob" in users.stdout
        sasl = f"{kafka.host}:{kafka.ports['SASL_PLAINTEXT']}"
        before = _txbroker("users", "list", "--bootstrap-server", kafka.bootstrap)
        assert before.returncode == 0 and "bob" not in before.stdout, before
        _run_script(users.stdout, {"PASSWORD_1": PASSWORD, "PASSWORD_2": BOB})
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            # In, but bob has no ACL: he may not read orders.
            assert _read_error(sasl, "orders", "bob", BOB, mech) == \
                "TOPIC_AUTHORIZATION_FAILED"
        listed = _txbroker("users", "list", "--bootstrap-server", kafka.bootstrap)
        assert "bob" in listed.stdout and "SCRAM-SHA-512" in listed.stdout, listed.stdout
    finally:
        source.kill()
        if kafka.running:
            kafka.terminate()
