"""Share groups (KIP-932) in the console over HTTP, with a real confluent-kafka
ShareConsumer: the groups page lists them (or says they are off), a share group's page
shows its members and each share-partition's window, records by state, delivery counts
and lag."""

from __future__ import annotations

import html
import re
import urllib.parse

import pytest

from tests.integration.test_share_groups import ENABLED, ck, poll_until, produce, share_consumer

from .http_client import ConsoleClient, wait_for

GROUP = "sg-<b>share</b>"


@pytest.fixture
def txbroker_config():
    return {"admin.http.port": "0", **ENABLED}


@pytest.fixture
def client(txbroker):
    port = txbroker.call(lambda b: b.admin_http.port)
    return ConsoleClient(f"http://127.0.0.1:{port}")


def cells(body: str, table_id: str) -> list[list[str]]:
    """The body rows of a table, each cell's markup."""
    part = body.split(f'id="{table_id}"')[1].split("</table>")[0].split("<tbody>")[1]
    return [re.findall(r"<td>(.*?)</td>", row) for row in part.split("</tr>") if "<td>" in row]


def text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_share_group_pages_show_members_windows_states_and_lag(txbroker, client):
    txbroker.create_topic("share-t")
    produce(txbroker.bootstrap, "share-t", 6)
    c = share_consumer(txbroker.bootstrap, GROUP, "share-t", explicit=True,
                       **{"client.id": "share-member"})
    try:
        got = sorted(poll_until(c, 6), key=lambda m: m.offset())
        assert [m.offset() for m in got] == list(range(6))
        # 0, 1 accepted, 2 rejected, 3 released; 4 and 5 stay acquired.
        for m, kind in zip(got[:4], [ck.AcknowledgeType.ACCEPT] * 2
                           + [ck.AcknowledgeType.REJECT, ck.AcknowledgeType.RELEASE], strict=True):
            c.acknowledge(m, kind)
        c.commit_sync(10)

        status, body = client.get("/console/groups")
        assert status == 200 and html.escape(GROUP) in body and GROUP not in body
        [row] = cells(body, "share-groups")
        assert [text(x) for x in row] == [GROUP, "Stable", "1", "1", "3"]
        status, body = client.get("/console/groups/" + urllib.parse.quote(GROUP, safe=""))
        assert status == 200 and "<h1>Share group</h1>" in body
        [member] = cells(body, "members")
        assert (member[1], member[-1]) == ("share-member", "share-t-0")
        [p] = [[text(x) for x in row] for row in cells(body, "share-partitions")]
        # Partition, start, end, HW, lag, available, acquired, acknowledged, archived,
        # delivery counts, max delivery count: the window is 3..5 (0-2 are done).
        assert p[:11] == ["share-t-0", "3", "6", "6", "3", "1", "2", "0", "0", "1×3", "1"]
    finally:
        c.close()

    # Closed: its records are released and the group is empty.
    def empty_page():
        body = client.get("/console/groups/" + urllib.parse.quote(GROUP, safe=""))[1]
        return body if "<th>State</th><td>Empty</td>" in body else None

    body = wait_for(empty_page, what="the group to be empty")
    [p] = [[text(x) for x in row] for row in cells(body, "share-partitions")]
    assert p[5:7] == ["3", "0"]  # available 3, acquired 0
    assert cells(body, "members") == []
    assert 'class="empty">none' in body.split('id="members"')[1].split("</table>")[0]


@pytest.mark.parametrize("txbroker_config", [{"admin.http.port": "0", "txbroker.share.version": "0"}])
def test_the_groups_page_says_share_groups_are_off(txbroker, client):
    status, body = client.get("/console/groups")
    assert status == 200 and 'id="share-groups-off"' in body
    assert 'id="share-groups"' not in body
