"""A streams group's large assignment is computed off the event loop
(docs/consumer-groups.md, "Streams groups"): while a 100,000-task assignment is
computed, the broker keeps answering another client's requests."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from tests.differential.test_streams_group_bounds import wide
from tests.helpers import wait_until
from tests.integration.test_streams_groups_wire import ENABLED, heartbeat
from tests.integration.wire_util import (
    API_VERSIONS,
    METADATA,
    api_versions_request,
    connect,
    metadata_request,
)


@pytest.fixture
def txbroker_config():
    return dict(ENABLED)


def _answered_meanwhile(txbroker, action) -> tuple[object, list[float]]:
    """``action()``'s result, and how long each of another client's requests
    (ApiVersions and Metadata in turn, every 50 ms) took while it ran."""
    took: list[float] = []
    done = threading.Event()

    def other_client() -> None:
        client = connect(txbroker)
        try:
            for i in itertools.count():
                started = time.monotonic()
                if i % 2:
                    assert client.request(METADATA, 12, metadata_request(["wide-in"])).topics
                else:
                    assert client.request(API_VERSIONS, 3,
                                          api_versions_request(3)).error_code == 0
                took.append(time.monotonic() - started)
                if done.wait(0.05):
                    return
        finally:
            client.close()

    poller = threading.Thread(target=other_client)
    poller.start()
    try:
        assert wait_until(lambda: len(took) >= 2)
        return action(), took
    finally:
        done.set()
        poller.join()


@pytest.mark.parametrize("delay_ms", [0, pytest.param(200, marks=pytest.mark.long)])
def test_a_100k_task_assignment_leaves_the_event_loop_to_others(txbroker, caplog, delay_ms):
    """A lone member joins with 100 subtopologies of a 1000-partition topic: 100,000
    tasks (800 KB in its current assignment record, under max.message.bytes). The
    assignment is computed on the assignor's thread, at the join or when the initial
    rebalance delay ends (its timer); another client is answered within 0.5 s all
    along (0.8 s here when the assignor ran on the event loop)."""
    txbroker.create_topic("wide-in", 1000)
    if delay_ms:
        txbroker.call(lambda b: b.groups.group_configs.replace(
            "g", {"streams.initial.rebalance.delay.ms": str(delay_ms)}))
    client = connect(txbroker, timeout=60)
    try:
        def join_and_get_the_tasks() -> tuple[int, int]:
            r = heartbeat(client, "g", "m1", 0, topo=wide("wide-in", 100))
            tasks = sum(len(t.partitions) for t in r.active_tasks)
            while not tasks:  # the delay: ASSIGNMENT_DELAYED until its timer assigns
                time.sleep(0.1)
                r = heartbeat(client, "g", "m1", r.member_epoch, owned=())
                assert r.error_code == 0
                tasks = sum(len(t.partitions) for t in r.active_tasks or ())
            return r.error_code, tasks

        with caplog.at_level(logging.INFO):
            result, took = _answered_meanwhile(txbroker, join_and_get_the_tasks)
        assert result == (0, 100_000)
        assert "computed off the event loop" in caplog.text
        if delay_ms:
            assert "initial rebalance delay over, tasks assigned" in caplog.text
        assert max(took) < 0.5, sorted(took)[-3:]
    finally:
        client.close()
