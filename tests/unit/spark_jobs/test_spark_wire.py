"""The Spark source's wire client fails with one clear message: unreachable bootstrap
servers, a broker that never answers, a client that must not be pickled."""

from __future__ import annotations

import pickle
import socket
import threading

import pytest
from txbroker.spark_jobs.wire import TxBrokerSourceError, WireClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_bootstrap_is_reported_at_once():
    port = free_port()
    client = WireClient(f"127.0.0.1:{port}", timeout=30)
    with pytest.raises(TxBrokerSourceError) as info:
        client.topics(["t"])
    assert str(info.value) == (
        f"cannot connect to kafka.bootstrap.servers=127.0.0.1:{port}: Connection refused")


def test_several_bootstrap_servers_are_all_named():
    a, b = free_port(), free_port()
    with pytest.raises(TxBrokerSourceError, match=rf"127.0.0.1:{a}: Connection refused; "
                                                  rf"127.0.0.1:{b}: Connection refused"):
        WireClient(f"127.0.0.1:{a},127.0.0.1:{b}").topics(None)


def test_silent_broker_times_out():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True)
    thread.start()
    try:
        client = WireClient(f"127.0.0.1:{server.getsockname()[1]}", timeout=0.3)
        with pytest.raises(TxBrokerSourceError, match=r"Metadata: no answer from the broker "
                                                      r"within 0.3 s") as info:
            client.topics(["t"])
        assert info.value.code == "REQUEST_TIMED_OUT"
        client.close()
    finally:
        for conn, _ in accepted:
            conn.close()
        server.close()


def test_client_is_never_pickled():
    with pytest.raises(TypeError, match="must not be pickled"):
        pickle.dumps(WireClient("localhost:9092"))
