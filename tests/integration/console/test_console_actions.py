"""The console's abort action over HTTP against an in-process broker: the admin token's
login, CSRF and Origin checks, read-only configuration, ACLs, the INFO line saying who
did what, and both paths (the coordinator's abort of an open transaction, the KIP-664
marker for a hanging one)."""

from __future__ import annotations

import logging
import os
import time
import urllib.parse

import pytest
from confluent_kafka import KafkaException, Producer
from txbroker.protocol.records import Record, build_batch, read_header

from .http_client import ConsoleClient, form_fields, text_of, wait_for

TOKEN = "s3cret-console-token"
TID = "tx-abort-<me>"


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "admin.token"
    path.write_text(TOKEN + "\n")
    os.chmod(path, 0o600)
    return str(path)


@pytest.fixture
def txbroker_config(token_file):
    return {"admin.http.port": "0", "admin.http.auth.token.file": token_file}


@pytest.fixture
def client(txbroker):
    port = txbroker.call(lambda b: b.admin_http.port)
    return ConsoleClient(f"http://127.0.0.1:{port}")


def _open_transaction(txbroker) -> Producer:
    txbroker.create_topic("abort-t", 1)
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": TID})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(3):
        p.produce("abort-t", value=b"open-%d" % i, partition=0)
    assert p.flush(10) == 0
    return p


def _abort_path() -> str:
    return "/console/transactions/" + urllib.parse.quote(TID, safe="") + "/abort"


def test_login_is_needed_and_a_wrong_token_is_refused(txbroker, client):
    status, _body, headers = client.request("/console/topics", follow=False)
    assert status == 303 and headers["Location"].startswith("/console/login?next=")
    status, body, headers = client.request("/console/login",
                                           {"token": "wrong", "next": "/console/x?a=1&b=2"},
                                           follow=False)
    assert status == 303
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(headers["Location"]).query)
    assert query == {"failed": ["1"], "next": ["/console/x?a=1&b=2"]}
    assert client.get("/console/topics", follow=False)[0] == 303
    # Right after a wrong token this address waits (0.5 s): even the right one is
    # refused, without being compared (broker/console/throttle.py).
    status, _body, headers = client.request("/console/topics",
                                            headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 429 and headers["Retry-After"] == "1"
    time.sleep(0.6)
    # The bearer header works as well as the cookie (curl, scripts).
    status, body = client.get("/console/topics",
                              headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and "<h1>Topics</h1>" in body
    # An open redirect is not offered: "next" stays on this endpoint.
    status, _body, headers = client.request("/console/login",
                                            {"token": TOKEN, "next": "//evil.example/"},
                                            follow=False)
    assert status == 303 and headers["Location"] == "/"


def test_abort_an_open_transaction_lets_the_lso_catch_up(txbroker, client, caplog):
    producer = _open_transaction(txbroker)
    assert (txbroker.last_stable_offset("abort-t"), txbroker.high_watermark("abort-t")) == (0, 3)
    client.login(TOKEN)
    status, body = client.get("/console/transactions")
    assert status == 200 and "abort…" in body
    status, body = client.get(_abort_path())
    assert status == 200 and "PRODUCER_FENCED" in body
    fields = form_fields(body)
    assert set(fields) == {"producer_id", "producer_epoch", "csrf"}

    # Without the CSRF token, or from another site: refused, nothing aborted.
    status, body = client.post(_abort_path(), {**fields, "csrf": "x"})
    assert status == 403 and "CSRF" in body
    status, body = client.post(_abort_path(), fields,
                               headers={"Origin": "http://evil.example"})
    assert status == 403 and "cross-site" in body
    assert txbroker.last_stable_offset("abort-t") == 0

    with caplog.at_level(logging.INFO, logger="txbroker.console"):
        status, body = client.post(_abort_path(), fields)
    assert status == 200 and "Aborting the transaction of" in text_of(body, "flash")
    assert any("User:ANONYMOUS (admin token, console, from 127.0.0.1) aborted the "
               "transaction of 'tx-abort-<me>'" in r.getMessage() for r in caplog.records)
    wait_for(lambda: txbroker.last_stable_offset("abort-t") == txbroker.high_watermark("abort-t")
             == 4, what="the ABORT marker and the LSO")
    # Counted as an operator's abort, not a timeout (once CompleteAbort is written).
    wait_for(lambda: txbroker.call(lambda b: b.transactions.outcomes.get("aborted", 0)) == 1,
             what="the aborted outcome")
    assert txbroker.call(lambda b: b.transactions.outcomes.get("timed_out", 0)) == 0
    # The producer was fenced.
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)
    # Again: the transaction is no longer the one the form named.
    status, body = client.post(_abort_path(), fields)
    assert status == 409 and "INVALID_TXN_STATE" in text_of(body, "error")


def _append_hanging(broker, topic: str, producer_id: int, timestamp: int):
    """A transactional batch of a producer id no coordinator knows, last written at
    ``timestamp``: how a transaction hangs (a lost marker, a coordinator's bug)."""
    plog = broker.logs.get_log(topic, 0)
    batch = bytearray(build_batch([Record(b"k", b"hanging", timestamp=timestamp)],
                                  producer_id=producer_id, producer_epoch=3,
                                  base_sequence=0, transactional=True))
    plog.append(batch, read_header(batch))


def test_abort_a_hanging_transaction_with_a_kip_664_marker(txbroker, client, caplog):
    txbroker.create_topic("hang-t", 1)
    old = int(time.time() * 1000) - 20 * 60_000  # past transaction.max.timeout.ms (15 min)
    txbroker.call(_append_hanging, "hang-t", 777_000, old)
    wait_for(lambda: txbroker.high_watermark("hang-t") == 1, what="the batch")
    assert txbroker.last_stable_offset("hang-t") == 0
    client.login(TOKEN)
    status, body = client.get("/console/transactions")
    hanging = body.split('id="hanging"')[1].split("</table>")[0]
    assert "hang-t-0" in hanging and "777000" in hanging
    status, body = client.get("/console/topics/hang-t/0")
    assert '<span class="hanging">hanging</span>' in body
    status, body = client.get("/console/hanging/abort?topic=hang-t&partition=0"
                              "&producer_id=777000")
    assert status == 200 and "NOT hanging" not in body
    fields = form_fields(body)
    with caplog.at_level(logging.INFO, logger="txbroker.console"):
        status, body = client.post("/console/hanging/abort", fields)
    assert status == 200 and "Aborted producer 777000" in text_of(body, "flash")
    assert any("wrote an ABORT marker for producer 777000 epoch 3 in hang-t-0 (KIP-664): "
               "NONE" in r.getMessage() for r in caplog.records)
    wait_for(lambda: txbroker.last_stable_offset("hang-t") == 2, what="the LSO")
    status, body = client.get("/console/transactions")
    assert "hang-t-0" not in body.split('id="hanging"')[1].split("</table>")[0]


def test_a_partition_of_a_live_transaction_is_not_aborted_by_marker(txbroker, client):
    producer = _open_transaction(txbroker)
    client.login(TOKEN)
    pid = txbroker.call(lambda b: b.transactions.state.describe(TID).producer_id)
    status, body = client.get(f"/console/hanging/abort?topic=abort-t&partition=0"
                              f"&producer_id={pid}")
    assert status == 200 and "NOT hanging" in body
    status, body = client.post("/console/hanging/abort", form_fields(body))
    assert status == 409 and text_of(body, "error").startswith("INVALID_TXN_STATE")
    assert txbroker.last_stable_offset("abort-t") == 0
    producer.abort_transaction(10)


class TestReadOnly:
    @pytest.fixture
    def txbroker_config(self, token_file):
        return {"admin.http.port": "0", "admin.http.auth.token.file": token_file,
                "admin.http.console.read.only": "true"}

    def test_no_action_when_read_only(self, txbroker, client):
        producer = _open_transaction(txbroker)
        client.login(TOKEN)
        status, body = client.get("/console/transactions")
        assert status == 200 and "abort…" not in body
        assert client.get(_abort_path())[0] == 403
        status, body = client.post(_abort_path(), {"csrf": "x"})
        assert status == 403 and "read-only" in body
        assert txbroker.last_stable_offset("abort-t") == 0
        producer.abort_transaction(10)


class TestAcls:
    @pytest.fixture
    def txbroker_config(self, token_file):
        return {"admin.http.port": "0", "admin.http.auth.token.file": token_file,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "allow.everyone.if.no.acl.found": "false",
                "super.users": "User:ANONYMOUS;User:admin",
                "admin.http.console.principal": "User:operator"}

    def test_the_console_principal_needs_write_on_the_transactional_id(self, txbroker,
                                                                       client):
        producer = _open_transaction(txbroker)  # as ANONYMOUS, a super user here
        client.login(TOKEN)
        status, body = client.get(_abort_path())
        status, body = client.post(_abort_path(), form_fields(body))
        assert status == 403
        assert text_of(body, "error").startswith("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        assert txbroker.last_stable_offset("abort-t") == 0
        producer.abort_transaction(10)

    def test_an_acl_granting_write_on_the_transactional_id_allows_the_abort(self, txbroker,
                                                                            client):
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        producer = _open_transaction(txbroker)
        admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})  # a super user
        acl = AclBinding(ResourceType.TRANSACTIONAL_ID, TID, ResourcePatternType.LITERAL,
                         "User:operator", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
        for future in admin.create_acls([acl]).values():
            future.result(10)
        client.login(TOKEN)
        status, body = client.get("/console/security")
        assert "User:operator" in body and "TRANSACTIONAL_ID" in body
        status, body = client.get(_abort_path())
        status, body = client.post(_abort_path(), form_fields(body))
        assert status == 200 and "Aborting the transaction of" in text_of(body, "flash")
        wait_for(lambda: txbroker.last_stable_offset("abort-t") == 4, what="the LSO")
        del producer


def test_over_https_the_session_cookie_is_secure(tmp_path, token_file):
    import ssl

    from txbroker.testing import BrokerThread

    from tests.pki import make_ca, make_cert

    make_ca(tmp_path)
    make_cert(tmp_path, "server", "localhost")
    broker = BrokerThread(str(tmp_path / "data"), {
        "admin.http.port": "0", "admin.http.auth.token.file": token_file,
        "admin.http.ssl.keystore.location": str(tmp_path / "server-keystore.pem")}).start()
    try:
        port = broker.call(lambda b: b.admin_http.port)
        client = ConsoleClient(f"https://localhost:{port}", ssl.create_default_context(
            cafile=str(tmp_path / "ca.pem")))
        status, _body, headers = client.request("/console/login",
                                                {"token": TOKEN, "next": "/"}, follow=False)
        assert status == 303
        cookie = headers["Set-Cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    finally:
        broker.stop()


class TestConsoleOff:
    @pytest.fixture
    def txbroker_config(self):
        return {"admin.http.port": "0", "admin.http.console.enable": "false"}

    def test_the_endpoint_keeps_its_paths_without_the_console(self, txbroker, client):
        assert client.get("/")[0] == 404
        assert client.get("/console/topics")[0] == 404
        assert client.get("/metrics")[0] == 200
