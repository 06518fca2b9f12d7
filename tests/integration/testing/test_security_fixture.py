"""The pytest fixture started secured (``txbroker_security``), as a user's suite does."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer


@pytest.fixture
def txbroker_security():
    return {"listeners": {"PLAINTEXT": "PLAINTEXT", "EXTERNAL": "SASL_SSL", "CERTS": "SSL"},
            "users": {"alice": "alice-secret"}, "sasl_mechanisms": ["SCRAM-SHA-512"]}


@pytest.fixture
def txbroker_config():
    return {"listener.name.certs.ssl.client.auth": "required"}  # mTLS on CERTS only


def test_fixture_serves_plaintext_sasl_ssl_and_mtls(txbroker, topic):
    assert txbroker.bootstrap == txbroker.bootstrap_for("PLAINTEXT")
    producers = []  # kept open: their connections are what sessions() shows
    for listener, kwargs in (("PLAINTEXT", {}), ("EXTERNAL", {"mechanism": "SCRAM-SHA-512"}),
                             ("CERTS", {"client_certificate": True})):
        conf = txbroker.client_config(listener, "alice" if listener == "EXTERNAL" else None, **kwargs)
        producer = Producer({**conf, "acks": "all"})
        errors: list = []
        producer.produce(topic, listener.encode(), on_delivery=lambda e, _m, out=errors: out.append(e))
        assert producer.flush(15) == 0 and errors == [None]
        producers.append(producer)
    principals = {(listener, p) for _peer, listener, p in txbroker.sessions()}
    assert {("PLAINTEXT", "User:ANONYMOUS"), ("EXTERNAL", "User:alice"),
            ("CERTS", "User:client")} <= principals
    assert txbroker.high_watermark(topic) == 3


def test_secured_broker_thread_restarts_on_the_same_ports(txbroker, topic):
    before = {name: txbroker.bootstrap_for(name) for name in ("PLAINTEXT", "EXTERNAL", "CERTS")}
    txbroker.restart()
    assert {name: txbroker.bootstrap_for(name) for name in before} == before
    conf = txbroker.client_config("EXTERNAL", "alice", mechanism="SCRAM-SHA-512")
    producer = Producer({**conf, "acks": "all"})
    producer.produce(topic, b"after restart")
    assert producer.flush(15) == 0
    assert txbroker.high_watermark(topic) == 1
