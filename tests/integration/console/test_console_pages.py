"""The console's pages over HTTP against an in-process broker with real clients: what
each page shows of transactions, the LSO, groups and records, escaping, bounds."""

from __future__ import annotations

import errno
import html
import json
import urllib.parse

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .http_client import ConsoleClient, text_of, wait_for

TID = 'tx-<b id="x">bold</b>/1'
GROUP = "g-<script>alert(1)</script>"


@pytest.fixture
def txbroker_config():
    return {"admin.http.port": "0",
            # consumer-protocol members heartbeat fast (Kafka's default is 5 s)
            "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.min.heartbeat.interval.ms": "100"}


@pytest.fixture
def client(txbroker):
    port = txbroker.call(lambda b: b.admin_http.port)
    return ConsoleClient(f"http://127.0.0.1:{port}")


def _pipeline(txbroker):
    """console-t-0: a committed record (HTML in value and header), an aborted one, and
    an open transaction (two records) that holds the LSO back."""
    txbroker.create_topic("console-t", 2)
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": TID})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("console-t", key=b"k1", value=b'{"v": "<img src=x onerror=alert(1)>"}',
              partition=0, headers=[("h<1>", b"<i>hv</i>")])
    p.commit_transaction(10)
    p.begin_transaction()
    p.produce("console-t", value=b"aborted-value", partition=0)
    assert p.flush(10) == 0
    p.abort_transaction(10)
    p.begin_transaction()
    p.produce("console-t", value=b"open-value-1", partition=0)
    p.produce("console-t", value=b"open-value-2", partition=0)
    assert p.flush(10) == 0
    return p


def test_pages_show_an_open_transaction_holding_the_lso_back(txbroker, client):
    producer = _pipeline(txbroker)
    hw, lso = txbroker.high_watermark("console-t", 0), txbroker.last_stable_offset("console-t", 0)
    assert (hw, lso) == (6, 4)  # record, COMMIT, aborted, ABORT, then the open two

    status, body = client.get("/")
    assert status == 200 and "<h1>Overview</h1>" in body
    assert "PLAINTEXT" in body and "transaction.version" in body
    assert 'id="charts"' in body

    status, body = client.get("/console/topics")
    assert status == 200 and "console-t" in body

    status, body = client.get("/console/topics/console-t/0")
    assert status == 200
    assert (text_of(body, "lso"), text_of(body, "hw"), text_of(body, "held")) == ("4", "6", "2")
    # The producer, its open transaction's first offset, and its transactional id escaped.
    assert html.escape(TID) in body and TID not in body
    assert "<td>4</td>" in body

    status, body = client.get("/console/transactions")
    assert status == 200
    assert html.escape(TID) in body and TID not in body
    assert ">Ongoing<" in body and "console-t-0" in body
    assert "data-age-ms=" in body and "1 min 0 s" in body  # age against the 60 s timeout
    # No token file: no abort action is offered.
    assert "abort…" not in body

    status, body = client.get("/console/transactions/" + urllib.parse.quote(TID, safe=""))
    assert status == 200 and text_of(body, "state") == "Ongoing"
    assert "__transaction_state-" in body
    del producer


def test_record_browser_isolation_levels(txbroker, client):
    producer = _pipeline(txbroker)
    base = "/console/topics/console-t/0/records?offset=0"
    status, body = client.get(base + "&isolation=read_uncommitted")
    assert status == 200
    assert "COMMIT marker" in body and "ABORT marker" in body
    assert "aborted-value" in body and '<span class="aborted">aborted</span>' in body
    assert "open-value-2" in body  # up to the high watermark
    assert body.count('<span class="open">open transaction</span>') == 2
    # HTML in a value or header is text.
    assert "&lt;img src=x onerror=alert(1)&gt;" in body and "<img src=x" not in body
    assert "h&lt;1&gt;: " in body and "&lt;i&gt;hv&lt;/i&gt;" in body

    status, body = client.get(base + "&isolation=read_committed")
    assert status == 200
    assert "aborted-value" not in body and "open-value-1" not in body  # aborted; past the LSO
    assert "marker" not in body.split('id="records"')[1]
    assert "k1" in body
    assert text_of(body, "hidden").startswith("3 control markers")

    status, body = client.get(base + "&isolation=read_uncommitted&format=hex")
    assert "6b 31" in body  # "k1"
    status, body = client.get(base + "&isolation=read_committed&format=json")
    assert '&quot;v&quot;: &quot;&lt;img' in body and "<pre class=\"json\">" in body
    # Offset and timestamp search.
    status, body = client.get("/console/topics/console-t/0/records?isolation=read_uncommitted"
                              "&offset=2&limit=1")
    assert "aborted-value" in body and "k1" not in body
    status, body = client.get("/console/topics/console-t/0/records?isolation=read_uncommitted"
                              "&timestamp=0")
    assert "First record at or after timestamp 0: offset 0." in body
    del producer


def test_group_lag_against_the_high_watermark_and_the_lso(txbroker, client):
    producer = _pipeline(txbroker)
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": GROUP,
                         "client.id": "console-member", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    assigned = []
    consumer.subscribe(["console-t"], on_assign=lambda _c, parts: assigned.extend(parts))
    wait_for(lambda: consumer.poll(0.1) is None and len(assigned) == 2, what="assignment")
    consumer.commit(offsets=[TopicPartition("console-t", 0, 1)], asynchronous=False)
    try:
        status, body = client.get("/console/groups")
        assert status == 200 and html.escape(GROUP) in body and GROUP not in body
        status, body = client.get("/console/groups/" + urllib.parse.quote(GROUP, safe=""))
        assert status == 200
        members = body.split('id="members"')[1].split("</table>")[0]
        assert "console-member" in members and "console-t-0, console-t-1" in members
        assert '<span class="lag-hw">5</span>' in body  # 6 - 1
        assert '<span class="lag-lso">3</span>' in body  # 4 - 1: the open transaction's two
    finally:
        consumer.close()
    del producer


def test_consumer_protocol_group_members_epochs_and_assignment(txbroker, client):
    """A confluent-kafka member with group.protocol=consumer (KIP-848): the group list
    and page show it with its epochs, assignor, the member's epoch and its current and
    target assignment, and the lag of its committed offset."""
    from tests.integration.consumer_util import owned, poll_until

    producer = _pipeline(txbroker)
    group = "cg-<b>848</b>"
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "client.id": "cp-member",
                         "enable.auto.commit": False})

    def stable():
        g = txbroker.call(lambda b: b.groups.consumer.groups.get(group))
        return g is not None and g.state == "Stable" and owned(consumer) == {0, 1}

    consumer.subscribe(["console-t"])
    try:
        assert poll_until([consumer], stable, timeout=30)
        consumer.commit(offsets=[TopicPartition("console-t", 0, 1)], asynchronous=False)
        g = txbroker.call(lambda b: b.groups.consumer.groups.get(group))
        [(member_id, m)] = g.members.items()
        status, body = client.get("/console/groups")
        assert status == 200 and html.escape(group) in body and group not in body
        row = body.split(html.escape(group) + "</a>")[1].split("</tr>")[0]
        assert "Stable" in row and "consumer (KIP-848)" in row
        status, body = client.get("/console/groups/" + urllib.parse.quote(group, safe=""))
        assert status == 200
        head = body.split('class="kv"')[1].split("</table>")[0]
        assert f"<th>Group epoch</th><td>{g.group_epoch}</td>" in head
        assert f"<th>Assignment epoch</th><td>{g.assignment_epoch}</td>" in head
        assert "<th>Assignor</th><td>uniform</td>" in head
        members = body.split('id="members"')[1].split("</table>")[0]
        cells = [c.split("</td>")[0] for c in members.split("<td>")[1:]]
        assert cells[0] == html.escape(member_id) and cells[2] == "cp-member"
        assert cells[4:] == [str(m.member_epoch), "console-t-0, console-t-1",
                             "console-t-0, console-t-1"], cells
        assert '<span class="lag-hw">5</span>' in body  # 6 - 1
        assert '<span class="lag-lso">3</span>' in body  # 4 - 1: the open transaction's two
    finally:
        consumer.close()
    del producer


def test_auto_refresh_is_a_meta_refresh(txbroker, client):
    status, body = client.get("/console/transactions?state=all&refresh=2")
    assert status == 200 and '<meta http-equiv="refresh" content="2">' in body
    # The toggle turns it off and keeps the other parameters.
    assert 'href="/console/transactions?state=all" class="refresh"' in body
    status, body = client.get("/console/transactions?refresh=2%22%3E%3Cscript%3E")
    assert "http-equiv" not in body and "<script>" not in body


def test_the_charts_source_counts_bytes_and_transactions(txbroker, client):
    producer = _pipeline(txbroker)
    def rates():
        status, body = client.get("/console/api/rates")
        assert status == 200
        return json.loads(body)

    # The outcomes are counted once CompleteCommit/CompleteAbort is written.
    wait_for(lambda: (rates()["committed"], rates()["aborted"]) == (1, 1), what="outcomes")
    r = rates()
    assert r["produce_bytes"] > 0
    assert sum(r["end_txn"]["counts"]) == 2  # the commit's EndTxn and the abort's
    assert len(r["fsync"]["counts"]) == len(r["fsync"]["bounds"]) + 1
    del producer


def test_unknown_things_are_404_and_lists_are_bounded(txbroker, client):
    assert client.get("/console/topics/nope")[0] == 404
    assert client.get("/console/topics/console-t/x")[0] == 404
    assert client.get("/console/transactions/nope")[0] == 404
    assert client.get("/console/groups/nope")[0] == 404
    txbroker.create_topic("many", 250)
    status, body = client.get("/console/topics/many")
    assert status == 200
    assert body.count(">records</a>") == 100  # a page (PAGE_SIZE)
    assert "1–100 of 250" in body and 'class="next"' in body
    status, body = client.get("/console/topics/many?start=200&limit=100000")
    assert body.count(">records</a>") == 50 and "201–250 of 250" in body


def test_a_broker_process_logs_the_console_url(tmp_path):
    """What `make demo` prints: the admin endpoint's URL, read from the broker's log."""
    import urllib.request

    from txbroker.testing import BrokerProcess

    broker = BrokerProcess(str(tmp_path / "data"), {"admin.http.port": "0"}).start()
    try:
        assert broker.admin_url and broker.admin_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(broker.admin_url + "/", timeout=10) as resp:
            assert resp.status == 200 and "<h1>Overview</h1>" in resp.read().decode()
    finally:
        broker.terminate()


def test_every_page_shows_the_storage_banner_while_a_condition_lasts(txbroker, client):
    txbroker.create_topic("console-t", 2)
    pages = ("/", "/console/topics", "/console/topics/console-t",
             "/console/topics/console-t/0", "/console/transactions", "/console/groups",
             "/console/security")
    for path in pages:
        assert 'id="storage-banner"' not in client.get(path)[1], path

    def disk_full(broker):
        # What an append refused by a full disk reports (storage/disk_conditions.py);
        # the path carries HTML, which the banner shows as text.
        broker.logs.disk.refused(OSError(errno.ENOSPC, "No space left on device",
                                         "/data/<b>x</b>"), "append to console-t-0")

    txbroker.call(disk_full)
    for path in pages:
        status, body = client.get(path)
        assert status == 200 and 'id="storage-banner"' in body, path
        assert "disk_full: /data/&lt;b&gt;x&lt;/b&gt;: append to console-t-0" in body
        assert "<b>x</b>" not in body
    # The login page, which strangers see, has no banner.
    assert 'id="storage-banner"' not in client.get("/console/login")[1]
