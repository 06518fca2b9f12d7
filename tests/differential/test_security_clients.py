"""The client side of security (client/security.py) against a secured broker:
``txbroker users`` (KIP-554) and the tools' ``--command-config`` over SASL_PLAINTEXT,
SASL_SSL and SSL, with SCRAM-SHA-256/512, PLAIN and unsecured OAUTHBEARER, and the
one-line errors of wrong passwords, mechanisms a listener does not enable, untrusted
certificates and plaintext sent to a TLS port.

``secured`` is parametrized over a secured txbroker and Apache Kafka 4
(tests/kafka_reference.py) with the same listeners, mechanisms, certificates and users
(the same broker properties); every assertion is about what Kafka answers. The Kafka leg
carries the ``kafka`` marker (``make test-kafka``), the txbroker leg runs in ``make test``.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from txbroker.broker.security import scram_credentials
from txbroker.client.security import OAUTHBEARER_MODULE, PLAIN_MODULE, SCRAM_MODULE
from txbroker.testing import BrokerThread
from txbroker.tools import cluster_client

from tests.differential.conftest import _kafka_leg_unavailable
from tests.kafka_reference import KafkaProcess
from tests.pki import make_ca, make_cert
from txbroker.cli import main as cli_main

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
PLAIN_USER, PLAIN_PASSWORD = "bob", "bob-secret"


class Secured:
    """A broker with PLAINTEXT, SASL_PLAINTEXT, SASL_SSL and SSL listeners."""

    def __init__(self, name: str, host: str, ports: dict[str, int], pki: Path) -> None:
        self.name = name
        self.host = host
        self.ports = ports
        self.pki = pki

    def address(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"


def _kafka_security_config(pki: Path) -> dict[str, str]:
    config = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        # SASL_SSL enables SCRAM only: the handshake test asks it for PLAIN.
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "server-keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.pem"),
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        prefix = f"listener.name.{listener}"
        config[f"{prefix}.plain.sasl.jaas.config"] = (
            f'{PLAIN_MODULE} required user_{PLAIN_USER}="{PLAIN_PASSWORD}";')
        for mech in ("scram-sha-256", "scram-sha-512"):
            config[f"{prefix}.{mech}.sasl.jaas.config"] = f"{SCRAM_MODULE} required;"
        config[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
            f'{OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub="broker";')
    return config


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_ca(d)
    make_cert(d, "server", "localhost")
    make_ca(d, "other")
    return d


LISTENERS = {"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL", "SSL": "SSL"}


@pytest.fixture(scope="module", params=[
    pytest.param("txbroker", id="txbroker"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
])
def secured(request, pki, tmp_path_factory) -> Iterator[Secured]:
    if request.param == "txbroker":
        yield from _secured_txbroker(pki, tmp_path_factory)
        return
    why = _kafka_leg_unavailable()
    if why:
        pytest.skip(why)
    kafka = KafkaProcess(
        tmp_path_factory.mktemp("kafka-secured"), _kafka_security_config(pki),
        extra_listeners=LISTENERS,
        scram=[f"SCRAM-SHA-256=[name={ADMIN},password={ADMIN_PASSWORD}]"])
    kafka.start()
    try:
        yield Secured("kafka", kafka.host, kafka.ports, pki)
    finally:
        if kafka.running:
            kafka.terminate()


def _secured_txbroker(pki: Path, tmp_path_factory) -> Iterator[Secured]:
    """txbroker with Kafka's broker properties: the same keys, listeners and users (the
    SCRAM credential written before the first start, as kafka-storage.sh --add-scram)."""
    data = str(tmp_path_factory.mktemp("txbroker-secured") / "data")
    scram_credentials.add_users(data, {ADMIN: ADMIN_PASSWORD},
                                mechanisms=("SCRAM-SHA-256",))
    listeners = {"PLAINTEXT": "PLAINTEXT", **LISTENERS}
    config = {**_kafka_security_config(pki),
              "listeners": ",".join(f"{name}://127.0.0.1:0" for name in listeners),
              "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in listeners.items())}
    with BrokerThread(data, config) as broker:
        ports = {name: broker.broker.listeners_by_name[name].port for name in listeners}
        yield Secured("txbroker", "127.0.0.1", ports, pki)


def cli(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    saved = cluster_client.OUT
    cluster_client.OUT = out
    try:
        with contextlib.redirect_stderr(err), \
                contextlib.ExitStack() as stack:
            if stdin is not None:
                import sys
                stack.enter_context(_swap(sys, "stdin", io.StringIO(stdin)))
            code = cli_main(list(argv))
    finally:
        cluster_client.OUT = saved
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _swap(obj, name, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


def _props(tmp_path: Path, broker: Secured, listener: str, **extra: str) -> str:
    props = {"bootstrap.servers": broker.address(listener), "security.protocol": listener,
             "request.timeout.ms": "15000", **extra}
    if listener in ("SSL", "SASL_SSL"):
        props.setdefault("ssl.truststore.location", str(broker.pki / "ca.pem"))
    path = tmp_path / f"client-{len(list(tmp_path.iterdir()))}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def _scram_jaas(user: str, password: str) -> str:
    return f'{SCRAM_MODULE} required username="{user}" password="{password}";'


def test_users_add_list_remove_over_the_wire(secured, tmp_path) -> None:
    b = secured.address("PLAINTEXT")
    r = cli("users", "--bootstrap-server", b, "add", "carol", "--mechanism", "SCRAM-SHA-256",
            "--mechanism", "SCRAM-SHA-512", "--iterations", "8192", "--password-stdin",
            stdin="carol-secret\n")
    assert r.returncode == 0, r.stderr
    r = cli("users", "--bootstrap-server", b, "list")
    rows = [line.split() for line in r.stdout.splitlines()]
    assert ["carol", "SCRAM-SHA-256", "8192"] in rows
    assert ["carol", "SCRAM-SHA-512", "8192"] in rows
    assert [ADMIN, "SCRAM-SHA-256", "4096"] in rows  # written at format time
    # The new credential authenticates.
    props = _props(tmp_path, secured, "SASL_PLAINTEXT", **{
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": _scram_jaas("carol", "carol-secret")})
    r = cli("topics", "--command-config", props, "list")
    assert r.returncode == 0, r.stderr
    r = cli("users", "--bootstrap-server", b, "remove", "carol", "--mechanism", "SCRAM-SHA-512")
    assert r.returncode == 0, r.stderr
    r = cli("users", "--bootstrap-server", b, "list", "carol")
    assert [line.split() for line in r.stdout.splitlines()][1:] == \
        [["carol", "SCRAM-SHA-256", "8192"]]
    r = cli("users", "--bootstrap-server", b, "remove", "carol")
    assert r.returncode == 0, r.stderr
    r = cli("users", "--bootstrap-server", b, "list", "carol")
    assert r.returncode == 1
    assert r.stderr.startswith("error: user 'carol': RESOURCE_NOT_FOUND: Attempt to describe "
                               "a user credential that does not exist")


def test_kafka_configs_syntax(secured) -> None:
    b = secured.address("PLAINTEXT")
    r = cli("users", "--bootstrap-server", b, "--alter", "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=dave-secret],"
            "SCRAM-SHA-512=[password=dave-secret]",
            "--entity-type", "users", "--entity-name", "dave")
    assert r.returncode == 0, r.stderr
    r = cli("users", "--bootstrap-server", b, "--describe", "--entity-type", "users",
            "--entity-name", "dave")
    assert r.stdout.strip() == ("SCRAM credential configs for user-principal 'dave' are "
                                "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    r = cli("users", "--bootstrap-server", b, "--alter", "--delete-config", "SCRAM-SHA-512",
            "--user", "dave")
    assert r.returncode == 0, r.stderr
    r = cli("users", "--bootstrap-server", b, "--describe", "--user", "dave")
    assert r.stdout.strip().endswith("are SCRAM-SHA-256=iterations=8192")


def test_too_few_iterations_is_the_brokers_unacceptable_credential(secured) -> None:
    r = cli("users", "--bootstrap-server", secured.address("PLAINTEXT"), "add", "erin",
            "--iterations", "1000", "--password", "x")
    assert r.returncode == 1
    assert r.stderr.startswith("error: user 'erin': UNACCEPTABLE_CREDENTIAL")


@pytest.mark.parametrize("listener, mechanism", [
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "OAUTHBEARER"), ("SASL_SSL", "SCRAM-SHA-256"), ("SSL", None),
])
def test_tools_connect_securely(secured, tmp_path, listener, mechanism) -> None:
    extra = {}
    if mechanism == "PLAIN":
        extra = {"sasl.mechanism": "PLAIN", "sasl.jaas.config":
                 f'{PLAIN_MODULE} required username="{PLAIN_USER}" password="{PLAIN_PASSWORD}";'}
    elif mechanism == "OAUTHBEARER":
        extra = {"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
                 f'{OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub="svc";'}
    elif mechanism:
        extra = {"sasl.mechanism": mechanism,
                 "sasl.jaas.config": _scram_jaas(ADMIN, ADMIN_PASSWORD)}
    props = _props(tmp_path, secured, listener, **extra, **{"client.id": "ops"})
    topic = f"sec-{listener.lower()}-{(mechanism or 'tls').lower()}"
    r = cli("topics", "--command-config", props, "create", "--topic", topic)
    assert r.returncode == 0, r.stderr
    assert "note: ignoring client.id" in r.stderr  # unused keys: still a note
    r = cli("topics", "--command-config", props, "list")
    assert topic in r.stdout.split(), r.stderr
    r = cli("transactions", "--command-config", props, "list")
    assert r.returncode == 0, r.stderr


def test_wrong_password_is_sasl_authentication_failed(secured, tmp_path) -> None:
    props = _props(tmp_path, secured, "SASL_SSL", **{
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": _scram_jaas(ADMIN, "wrong")})
    r = cli("topics", "--command-config", props, "list")
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: SASL_AUTHENTICATION_FAILED: Authentication failed during "
                           "authentication due to invalid credentials with SASL mechanism "
                           "SCRAM-SHA-256"), line
    props = _props(tmp_path, secured, "SASL_PLAINTEXT", **{
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": _scram_jaas("nobody", "x")})
    r = cli("users", "--command-config", props, "list")
    assert r.returncode == 1 and "error: SASL_AUTHENTICATION_FAILED" in r.stderr


def test_mechanism_not_enabled_is_unsupported_sasl_mechanism(secured, tmp_path) -> None:
    props = _props(tmp_path, secured, "SASL_SSL", **{
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="a" password="b";'})
    r = cli("topics", "--command-config", props, "list")
    assert r.returncode == 1
    assert r.stderr.strip().startswith("error: UNSUPPORTED_SASL_MECHANISM: "), r.stderr
    enabled = r.stderr.split("(enabled: ")[1].rstrip(")\n").split(", ")
    assert sorted(enabled) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_untrusted_certificate_and_plaintext_to_a_tls_port(secured, tmp_path) -> None:
    props = _props(tmp_path, secured, "SSL",
                   **{"ssl.truststore.location": str(secured.pki / "other.pem")})
    r = cli("topics", "--command-config", props, "list")
    assert r.returncode == 1
    assert "SSL handshake with" in r.stderr and "not trusted" in r.stderr, r.stderr
    # A PLAINTEXT client on the SSL port: Kafka drops it; one line, not a traceback.
    r = cli("topics", "--bootstrap-server", secured.address("SSL"), "list")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _spark_options(secured: Secured, password: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": secured.address("SASL_SSL"), "subscribe": "x",
            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": _scram_jaas(ADMIN, password),
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(secured.pki / "ca.pem"),
            "kafka.request.timeout.ms": "15000"}


def test_spark_wire_client_reads_over_sasl_ssl(secured, tmp_path) -> None:
    from confluent_kafka import Producer
    from txbroker.spark_jobs.options import parse_options
    from txbroker.spark_jobs.reader import open_client
    from txbroker.spark_jobs.wire import TxBrokerSourceError

    topic = "sec-spark"
    producer = Producer({
        "bootstrap.servers": secured.address("SASL_SSL"), "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ADMIN,
        "sasl.password": ADMIN_PASSWORD, "ssl.ca.location": str(secured.pki / "ca.pem")})
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    opts = parse_options({**_spark_options(secured, ADMIN_PASSWORD), "subscribe": topic},
                         streaming=False)
    with open_client(opts) as client:
        assert list(client.topics([topic])[topic].leaders) == [0]
        assert client.latest([(topic, 0)]) == {(topic, 0): 5}
        fetched = client.fetch(topic, 0, 0)
        assert fetched.high_watermark == 5 and len(fetched.records) > 0
    opts = parse_options({**_spark_options(secured, "wrong"), "subscribe": topic},
                         streaming=False)
    with open_client(opts) as client, pytest.raises(TxBrokerSourceError) as info:
        client.topics([topic])
    assert info.value.code == "SASL_AUTHENTICATION_FAILED"


def test_expired_oauthbearer_token_is_sasl_authentication_failed(secured, tmp_path) -> None:
    """The broker answers an expired unsecured JWT with RFC 7628's error challenge; the
    client answers 0x01 and the broker fails the exchange (not a dropped connection)."""
    props = _props(tmp_path, secured, "SASL_PLAINTEXT", **{
        "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
        f'{OAUTHBEARER_MODULE} required unsecuredLoginStringClaim_sub="svc" '
        'unsecuredLoginLifetimeSeconds="0";'})
    r = cli("topics", "--command-config", props, "list")
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: SASL_AUTHENTICATION_FAILED"), line
