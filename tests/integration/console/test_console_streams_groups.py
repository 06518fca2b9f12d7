"""Streams groups (KIP-1071) in the console over HTTP, the group made by raw
StreamsGroupHeartbeat requests: the groups page lists them (or says they are off), a
streams group's page shows its topology and whether it is ready, its members' active
tasks (current and target) and its committed offsets and lag."""

from __future__ import annotations

import urllib.parse

import confluent_kafka as ck
import pytest

from tests.integration.test_streams_groups_wire import ENABLED, heartbeat, settle
from tests.integration.tools.test_streams_group_tools import commit_offset
from tests.integration.wire_util import connect

from .test_console_share_groups import cells, client, text  # noqa: F401  (client: a fixture)

GROUP = "app-<b>streams</b>"


@pytest.fixture
def txbroker_config():
    return {"admin.http.port": "0", **ENABLED}


def stable_streams_group(txbroker, group: str) -> dict[str, set]:
    """Members m1 and m2 of ``group`` (the helpers' topology: subtopology 0 reads
    "input", 2 partitions, with the changelog app-store-changelog), Stable, and m1
    committed offset 1 of input-0 (3 records); each member's tasks."""
    txbroker.create_topic("input", 2)
    p = ck.Producer({"bootstrap.servers": txbroker.bootstrap})
    for i in range(3):
        p.produce("input", value=b"v%d" % i, partition=0)
    assert p.flush(10) == 0
    wire = connect(txbroker)
    try:
        epochs, owned = settle(wire, group, ["m1", "m2"])
        commit_offset(wire, group, "m1", epochs["m1"], "input", 0, 1)
    finally:
        wire.close()
    return owned


def test_streams_group_pages_show_topology_tasks_and_offsets(txbroker, client):  # noqa: F811
    owned = stable_streams_group(txbroker, GROUP)
    assert sorted(t for ts in owned.values() for t in ts) == [("0", 0), ("0", 1)]
    status, body = client.get("/console/groups")
    assert status == 200
    [row] = cells(body, "streams-groups")
    assert [text(x) for x in row][:3] + [text(row[4])] == [GROUP, "Stable", "2", "2"]
    assert GROUP not in [text(r[0]) for r in cells(body, "groups")]

    status, body = client.get("/console/groups/" + urllib.parse.quote(GROUP, safe=""))
    assert status == 200 and "<h1>Streams group</h1>" in body
    assert '<span id="topology-status">ready</span>' in body
    [sub] = [[text(x) for x in r] for r in cells(body, "subtopologies")]
    assert sub == ["0", "input", "-", "-", "app-store-changelog", "2"]
    members = {text(r[0]): [text(x) for x in r] for r in cells(body, "members")}
    assert sorted(members) == ["m1", "m2"]
    for m, tasks in owned.items():
        [(s, p)] = tasks
        # Active, standby, warm-up; then the target's; nothing being revoked.
        assert members[m][6:] == [f"{s}_{p}", "-", "-", f"{s}_{p}", "-", "-", "-"]
    [offsets] = [[text(x) for x in r] for r in cells(body, "offsets")]
    assert offsets[:6] == ["input-0", "1", "3", "3", "2", "2"]


@pytest.mark.parametrize("txbroker_config", [{"admin.http.port": "0",
                                              "txbroker.streams.version": "0"}])
def test_the_groups_page_says_streams_groups_are_off(txbroker, client):  # noqa: F811
    status, body = client.get("/console/groups")
    assert status == 200 and 'id="streams-groups-off"' in body
    assert 'id="streams-groups"' not in body


def test_a_topology_that_is_not_ready_says_why(txbroker, client):  # noqa: F811
    wire = connect(txbroker)
    try:  # "input" does not exist: the member gets the MISSING_SOURCE_TOPICS status
        r = heartbeat(wire, "waiting", "m1", 0)
        assert r.error_code == 0 and r.status
    finally:
        wire.close()
    status, body = client.get("/console/groups/waiting")
    assert status == 200 and "<th>State</th><td>NotReady</td>" in body
    assert '<span id="topology-status">Source topics input are missing.</span>' in body
    [sub] = [[text(x) for x in r] for r in cells(body, "subtopologies")]
    assert sub == ["0", "input", "-", "-", "app-store-changelog", "-"]
    [member] = [[text(x) for x in r] for r in cells(body, "members")]
    assert member[6:] == ["-"] * 7
