"""TLS and SASL listeners with real clients (confluent-kafka, kafka-python, aiokafka, kcat)
and on the wire: who gets in, with which principal, and what a wrong or hostile client
gets (Kafka's error, a closed connection, one log line; the broker serves the others)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import ssl
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from txbroker.protocol.messages import build, request_module
from txbroker.testing import BrokerProcess, BrokerThread

from tests.helpers import RawClient, wait_until

from ..wire_util import (
    API_VERSIONS,
    METADATA,
    api_versions_request,
    expect_closed,
    frame,
    metadata_request,
    recv_response,
    wait_for_log,
)

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
USERS = {"alice": "alice-secret", "bob": "b0b \"quoted\" secret"}
LISTENERS = ["PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT", "SSL", "MTLS"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("secure") / "data")
    listeners = {name: name for name in LISTENERS[:4]} | {"MTLS": "SSL"}
    with BrokerThread(data, {"group.initial.rebalance.delay.ms": "0",
                             "listener.name.mtls.ssl.client.auth": "required",
                             "listener.name.sasl_plaintext.sasl.enabled.mechanisms":
                                 "PLAIN,SCRAM-SHA-256,OAUTHBEARER"},
                      listeners=listeners, users=USERS) as b:
        yield b


def _roundtrip(conf: dict, topic: str) -> None:
    """Produce one record with acks=all and read it back with confluent-kafka."""
    producer = Producer({**conf, "acks": "all"})
    errors: list = []
    producer.produce(topic, b"hello", on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(15) == 0
    assert errors == [None]
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        msg = None
        deadline = time.monotonic() + 15
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                msg = None
        assert msg is not None and msg.value() == b"hello"
    finally:
        consumer.close()


def _principals(broker, listener: str) -> set[str]:
    return {p for _peer, name, p in broker.sessions() if name == listener}


def _connected_as(broker, listener: str, principal: str, client) -> bool:
    """Whether ``client`` shows up with ``principal``: librdkafka drops its bootstrap
    connection once it knows the broker by id and connects again, so there are moments
    with no connection open; ask again until one is."""
    def seen() -> bool:
        client.list_topics(timeout=10)
        return principal in _principals(broker, listener)
    return wait_until(seen, timeout=10, interval=0.1)


@pytest.mark.parametrize("listener, mechanism", [
    ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN"),
])
def test_confluent_kafka_authenticates_and_gets_the_user_principal(broker, topic, listener, mechanism):
    user = "bob" if mechanism == "PLAIN" else "alice"  # bob's password has quotes and spaces
    _roundtrip(broker.client_config(listener, user, mechanism=mechanism), topic)
    producer = Producer(broker.client_config(listener, user, mechanism=mechanism))
    assert _connected_as(broker, listener, f"User:{user}", producer)
    del producer


def test_mtls_principal_comes_from_the_client_certificate(broker, topic):
    cert, key = broker.certs.client_certificate("carol")
    conf = {**broker.client_config("MTLS"), "ssl.certificate.location": cert, "ssl.key.location": key}
    _roundtrip(conf, topic)
    producer = Producer(conf)
    assert _connected_as(broker, "MTLS", "User:carol", producer)
    # No certificate on a "requested" listener: ANONYMOUS.
    anonymous = Producer(broker.client_config("SSL"))
    assert _connected_as(broker, "SSL", "User:ANONYMOUS", anonymous)
    del producer, anonymous


def test_transactions_and_read_committed_over_sasl_ssl(broker, topic):
    conf = broker.client_config("SASL_SSL", "alice", mechanism="SCRAM-SHA-512")
    producer = Producer({**conf, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(15)
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    try:
        got = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert got == [b"committed"]
    finally:
        consumer.close()


def test_kafka_python_scram_over_tls_and_plain(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer

    for listener, mechanism in (("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")):
        conf = dict(bootstrap_servers=broker.bootstrap_for(listener), security_protocol=listener,
                    sasl_mechanism=mechanism, sasl_plain_username="alice",
                    sasl_plain_password=USERS["alice"])
        if listener == "SASL_SSL":
            conf.update(ssl_cafile=broker.certs.ca_file)
        producer = KafkaProducer(acks="all", **conf)
        producer.send(topic, f"kp-{mechanism}".encode()).get(timeout=15)
        producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             **conf)
    values = {m.value for m in consumer}
    consumer.close()
    assert values == {b"kp-SCRAM-SHA-512", b"kp-PLAIN"}


def test_aiokafka_scram_and_plain_over_tls(broker, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run():
        ctx = create_ssl_context(cafile=broker.certs.ca_file)
        for mechanism in ("SCRAM-SHA-256", "PLAIN"):
            conf = dict(bootstrap_servers=broker.bootstrap_for("SASL_SSL"),
                        security_protocol="SASL_SSL", ssl_context=ctx, sasl_mechanism=mechanism,
                        sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
            producer = AIOKafkaProducer(acks="all", **conf)
            await producer.start()
            try:
                await producer.send_and_wait(topic, mechanism.encode())
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        try:
            got = await consumer.getmany(timeout_ms=10000)
            return {m.value for batch in got.values() for m in batch}
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == {b"SCRAM-SHA-256", b"PLAIN"}


def test_kcat_sasl_ssl_and_mtls(broker, topic):
    sasl = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
            "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}",
            "-X", f"ssl.ca.location={broker.certs.ca_file}", "-b", broker.bootstrap_for("SASL_SSL")]
    subprocess.run(["kcat", *sasl, "-P", "-t", topic], input=b"from-kcat\n", check=True, timeout=30)
    mtls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={broker.certs.ca_file}",
            "-X", f"ssl.certificate.location={broker.certs.client_cert_file}",
            "-X", f"ssl.key.location={broker.certs.client_key_file}", "-b", broker.bootstrap_for("MTLS")]
    out = subprocess.run(["kcat", *mtls, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout.strip() == b"from-kcat"


def test_oauthbearer_unsecured_jwt(broker, topic):
    conf = {**broker.client_config("SASL_PLAINTEXT", "alice", mechanism="OAUTHBEARER"),
            "sasl.oauthbearer.config": "principal=dave", "enable.sasl.oauthbearer.unsecure.jwt": True}
    conf.pop("sasl.username")
    conf.pop("sasl.password")
    producer = Producer(conf)
    assert _connected_as(broker, "SASL_PLAINTEXT", "User:dave", producer)
    del producer


# --- failures ---------------------------------------------------------------------------


def _auth_error(conf: dict) -> str:
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 2000})
    producer.produce("never", b"x")

    def failed() -> bool:
        producer.poll(0.1)  # error_cb runs in poll
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    assert wait_until(failed, timeout=10)
    producer.purge()
    return next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "whatever")])
def test_wrong_password_and_unknown_user_fail_with_kafkas_message(broker, caplog, user, password):
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        message = _auth_error(broker.client_config("SASL_SSL", user, mechanism=mechanism,
                                                   password=password))
        if mechanism == "PLAIN":
            assert "Authentication failed: Invalid username or password" in message
        else:
            assert ("Authentication failed during authentication due to invalid credentials "
                    "with SASL mechanism SCRAM-SHA-256") in message
        record = wait_for_log(caplog, "failed authentication", f"User:{user}", mechanism,
                              level=logging.WARNING)
        assert password not in record.getMessage()
    _roundtrip(broker.client_config("SASL_SSL", "alice"), f"after-{user}")  # others still served


def test_kafka_python_is_refused_with_wrong_credentials(broker, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    caplog.set_level(logging.INFO)
    # kafka-python retries the bootstrap and gives up with a timeout. The broker answers
    # each attempt SASL_AUTHENTICATION_FAILED (58) with Kafka's message and closes the
    # connection, as Kafka does (test_plain_over_the_wire_and_the_delayed_failure checks
    # the bytes). kafka-python 3.0.12 drops data that arrives in the same read as the
    # close, so an attempt shows either the error or only "socket disconnected"
    # (docs/compatibility.md); how often each depends on the machine's timing.
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=broker.bootstrap_for("SASL_PLAINTEXT"),
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                      sasl_plain_username="alice", sasl_plain_password="nope", max_block_ms=3000,
                      bootstrap_timeout_ms=3000)
    refused = [r for r in caplog.records if r.name.startswith("txbroker")
               and "failed authentication" in r.getMessage() and "User:alice" in r.getMessage()
               and "SCRAM-SHA-256" in r.getMessage()]
    assert refused, "the broker logged no failed authentication"
    client = [r.getMessage() for r in caplog.records if r.name.startswith("kafka")]
    surfaced = [m for m in client if "[Error 58] SaslAuthenticationFailedError" in m]
    disconnected = [m for m in client if "socket disconnected" in m]
    assert surfaced or disconnected, client
    for message in surfaced:
        assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in message
    # Never authenticated: kafka-python sent nothing past SASL.
    assert not [r for r in caplog.records if r.name.startswith("txbroker")
                and "authenticated as User:alice" in r.getMessage()]


def _tls_client(broker, listener: str, cert: tuple[str, str] | None):
    ctx = ssl.create_default_context(cafile=broker.certs.ca_file)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    host, port = broker.bootstrap_for(listener).rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    tls = ctx.wrap_socket(sock, server_hostname="localhost")
    # TLS 1.3 reports a rejected client certificate on the first read.
    tls.sendall(frame(API_VERSIONS, 3, 1, api_versions_request()))
    return tls.recv(4)


@pytest.mark.parametrize("kind", ["untrusted", "expired", "none"])
def test_bad_client_certificates_are_refused_on_an_mtls_listener(broker, caplog, kind):
    caplog.set_level(logging.INFO, logger="txbroker")
    cert = None if kind == "none" else broker.certs.client_certificate(
        "eve", untrusted=kind == "untrusted", expired=kind == "expired")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        data = _tls_client(broker, "MTLS", cert)
        if data == b"":
            raise ConnectionResetError("closed")
    wait_for_log(caplog, "TLS handshake failed", "listener MTLS")
    # The same certificate problem through a real client; then a good client still works.
    assert _tls_client(broker, "MTLS", (broker.certs.client_cert_file, broker.certs.client_key_file))


def test_plaintext_sent_to_a_tls_port_is_closed_with_a_log_line(broker, caplog):
    caplog.set_level(logging.INFO, logger="txbroker")
    host, port = broker.bootstrap_for("SASL_SSL").rsplit(":", 1)
    client = RawClient(host, int(port))
    client.send_frame(frame(API_VERSIONS, 3, 1, api_versions_request()))
    expect_closed(client)
    wait_for_log(caplog, "TLS handshake failed", "listener SASL_SSL")
    _roundtrip(broker.client_config("SASL_SSL", "alice"), "after-plaintext")


def _raw(broker, listener: str) -> RawClient:
    host, port = broker.bootstrap_for(listener).rsplit(":", 1)
    return RawClient(host, int(port))


def _handshake(client: RawClient, mechanism: str, version: int = 1):
    m = request_module(SASL_HANDSHAKE, version)
    client.send_frame(frame(SASL_HANDSHAKE, version, 7, build(m.SaslHandshakeRequest, mechanism=mechanism)))
    return recv_response(client, SASL_HANDSHAKE, version)


def _authenticate(client: RawClient, token: bytes, version: int = 2):
    m = request_module(SASL_AUTHENTICATE, version)
    client.send_frame(frame(SASL_AUTHENTICATE, version, 8, build(m.SaslAuthenticateRequest, auth_bytes=token)))
    return recv_response(client, SASL_AUTHENTICATE, version)


def test_handshake_for_a_mechanism_not_enabled(broker, caplog):
    client = _raw(broker, "SASL_PLAINTEXT")
    response = _handshake(client, "SCRAM-SHA-512")  # enabled on SASL_SSL, not on this listener
    assert response is not None
    _corr, answer = response
    assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"]
    expect_closed(client)
    wait_for_log(caplog, "SCRAM-SHA-512", "not enabled", level=logging.WARNING)


def test_requests_before_authentication_close_the_connection(broker, caplog):
    client = _raw(broker, "SASL_PLAINTEXT")
    assert client.request(API_VERSIONS, 3, api_versions_request()).error_code == 0  # allowed
    client.send_frame(frame(METADATA, 12, 2, metadata_request(None)))
    expect_closed(client)
    wait_for_log(caplog, "Metadata request", "before SASL authentication", level=logging.WARNING)
    # SaslAuthenticate before SaslHandshake: closed as well.
    client = _raw(broker, "SASL_PLAINTEXT")
    m = request_module(SASL_AUTHENTICATE, 2)
    client.send_frame(frame(SASL_AUTHENTICATE, 2, 3, build(m.SaslAuthenticateRequest, auth_bytes=b"")))
    expect_closed(client)
    # A frame larger than sasl.server.max.receive.size before authentication: closed.
    client = _raw(broker, "SASL_PLAINTEXT")
    client.send_frame((524289).to_bytes(4, "big"))
    expect_closed(client)
    # Plain PLAINTEXT is unaffected; SaslHandshake there is ILLEGAL_SASL_STATE.
    client = _raw(broker, "PLAINTEXT")
    _corr, answer = _handshake(client, "PLAIN")
    assert answer.error_code == 34


def test_plain_over_the_wire_and_the_delayed_failure(broker):
    for version in (0, 1, 2):  # every SaslAuthenticate version Kafka 4 serves
        client = _raw(broker, "SASL_PLAINTEXT")
        assert _handshake(client, "PLAIN")[1].error_code == 0
        assert _authenticate(client, b"\x00alice\x00alice-secret", version)[1].error_code == 0
        assert client.request(METADATA, 12, metadata_request(None)) is not None  # now allowed
        assert _authenticate(client, b"again", version)[1].error_code == 34  # ILLEGAL_SASL_STATE
    client = _raw(broker, "SASL_PLAINTEXT")
    _handshake(client, "PLAIN")
    started = time.monotonic()
    _corr, answer = _authenticate(client, b"\x00alice\x00wrong")
    delayed = time.monotonic() - started
    assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert delayed >= 0.09  # connection.failed.authentication.delay.ms=100 (a lower bound only)
    expect_closed(client)


def test_saslhandshake_v0_then_bare_tokens(broker):
    client = _raw(broker, "SASL_PLAINTEXT")
    assert _handshake(client, "PLAIN", version=0)[1].error_code == 0
    client.send_frame(len(b"\x00alice\x00alice-secret").to_bytes(4, "big") + b"\x00alice\x00alice-secret")
    assert client.recv_frame() == b""  # PLAIN's empty final token
    assert client.request(METADATA, 12, metadata_request(None)) is not None


def _jwt(claims: dict) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'none'})}.{enc(claims)}."


def test_oauthbearer_expired_token_gets_the_json_error_then_failure(broker):
    client = _raw(broker, "SASL_PLAINTEXT")
    assert _handshake(client, "OAUTHBEARER")[1].error_code == 0
    token = _jwt({"sub": "dave", "exp": time.time() - 60, "iat": time.time() - 120})
    _corr, answer = _authenticate(client, f"n,,\x01auth=Bearer {token}\x01\x01".encode())
    assert answer.error_code == 0 and json.loads(answer.auth_bytes) == {"status": "invalid_token"}
    _corr, answer = _authenticate(client, b"\x01")
    assert answer.error_code == 58 and json.loads(answer.error_message) == {"status": "invalid_token"}
    expect_closed(client)


def test_several_listeners_advertise_their_own_endpoint(tmp_path):
    with BrokerThread(str(tmp_path / "d"), {
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "advertised.listeners": "INTERNAL://internal.example:19092"}) as b:
        port = b.broker.listeners_by_name["INTERNAL"].port
        md = RawClient("127.0.0.1", port).request(METADATA, 12, metadata_request(None))
        assert [(x.host, x.port) for x in md.brokers] == [("internal.example", 19092)]
        md = RawClient("127.0.0.1", b.port).request(METADATA, 12, metadata_request(None))
        assert [(x.host, x.port) for x in md.brokers] == [("127.0.0.1", b.port)]


# --- SCRAM credentials over the wire (KIP-554), durable ----------------------------------


def test_alter_user_scram_credentials_errors_on_the_wire(broker):
    m = request_module(51, 0)
    up = lambda name, mech=1, it=4096: build(m.ScramCredentialUpsertion, name=name, mechanism=mech,  # noqa: E731
                                             iterations=it, salt=b"salt", salted_password=b"p" * 32)
    request = build(m.AlterUserScramCredentialsRequest, deletions=(
        build(m.ScramCredentialDeletion, name="alice", mechanism=1),), upsertions=(
        up(""), up("alice"), up("big", it=16385), up("odd", mech=3), up("ok", mech=2)))
    answer = _raw(broker, "PLAINTEXT").request(51, 0, request)
    assert {r.user: r.error_code for r in answer.results} == {
        "": 93, "alice": 92, "big": 93, "odd": 33, "ok": 0}  # alice twice: left as she was
    m = request_module(50, 0)
    answer = _raw(broker, "PLAINTEXT").request(50, 0, build(m.DescribeUserScramCredentialsRequest, users=(
        build(m.UserName, name="ok"), build(m.UserName, name="alice"), build(m.UserName, name="alice"),
        build(m.UserName, name="nobody"))))
    assert {r.user: (r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in answer.results} == {"ok": (0, [(2, 4096)]), "alice": (92, []), "nobody": (91, [])}


def test_alter_and_describe_user_scram_credentials_survive_sigkill(tmp_path):
    data = str(tmp_path / "data")
    with BrokerProcess(data, listeners=["PLAINTEXT", "SASL_SSL"], users={"alice": "alice-secret"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_for("PLAINTEXT")})
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"frank-secret"),
            UserScramCredentialUpsertion("gina", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100),
                                         b"x"),
            UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
        ])
        futures["frank"].result(10)
        for user, code in (("gina", 93), ("nobody", 91)):
            with pytest.raises(KafkaException) as e:
                futures[user].result(10)
            assert e.value.args[0].code() == code
        b.proc.kill()  # SIGKILL right after the answer
        b.proc.wait(10)
        b.start()
        described = admin.describe_user_scram_credentials().result(10)  # every user
        assert {m.mechanism for m in described["alice"].scram_credential_infos} == {
            ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}
        assert [(i.mechanism, i.iterations) for i in described["frank"].scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_512, 8192)]
        _roundtrip({**b.client_config("SASL_SSL", "frank", mechanism="SCRAM-SHA-512",
                                      password="frank-secret")}, "frank-topic")
        admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_512)])["frank"].result(10)
        missing = admin.describe_user_scram_credentials(["frank"])
        with pytest.raises(KafkaException) as e:
            missing["frank"].result(10) if isinstance(missing, dict) else missing.result(10)
        assert e.value.args[0].code() == 91  # RESOURCE_NOT_FOUND
        assert "invalid credentials" in _auth_error(
            b.client_config("SASL_SSL", "frank", mechanism="SCRAM-SHA-512", password="frank-secret"))
    assert os.path.exists(os.path.join(data, "scram-credentials.json"))
