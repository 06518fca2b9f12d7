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
from tests.integration.test_streams_groups_wire import ENABLED, describe, heartbeat
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


# A bound on time (the other client's answers) on a shared machine: `make test-long`, as
# the unit tests of the offload (tests/unit/coordinator/test_streams_offload.py) and
# the streams model run in `make test`.
@pytest.mark.long
@pytest.mark.parametrize("delay_ms", [0, 200])
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


@pytest.mark.long
def test_the_groups_other_heartbeats_wait_for_the_assignment(txbroker, caplog):
    """A second member joins while the first one's 100,000-task assignment is being
    computed: its heartbeat waits for it (the group is held), then joins the group as
    it is after that assignment (ASSIGNMENT_DELAYED: within the assignment interval);
    its next heartbeat after the interval gets half the tasks, computed off the event
    loop again."""
    txbroker.create_topic("wide-in", 1000)
    topo = wide("wide-in", 100)
    first, second = connect(txbroker, timeout=60), connect(txbroker, timeout=60)
    answers: dict[str, object] = {}
    try:
        with caplog.at_level(logging.INFO):
            joining = threading.Thread(target=lambda: answers.update(
                m1=heartbeat(first, "g", "m1", 0, topo=topo)))
            joining.start()
            assert wait_until(lambda: "g" in txbroker.call(
                lambda b: dict(b.groups._streams_holds)), timeout=30, interval=0.01)
            r2 = heartbeat(second, "g", "m2", 0, topo=topo)
            joining.join()
            r1 = answers["m1"]
            assert (r1.error_code, r1.member_epoch) == (0, 2)
            assert sum(len(t.partitions) for t in r1.active_tasks) == 100_000
            # m2 joined after m1's assignment landed: the group epoch moved to 3, the
            # assignment waits for the interval.
            assert (r2.error_code, [s.status_code for s in r2.status]) == (0, [5])
            assert wait_until(lambda: heartbeat(second, "g", "m2", r2.member_epoch, owned=())
                              .status == (), timeout=10, interval=0.2)
        assert caplog.text.count("computed off the event loop") == 2
        (g,) = describe(first, "g")
        assert (g.group_epoch, g.assignment_epoch) == (3, 3)
        assert sorted(sum(len(t.partitions) for t in m.target_assignment.active_tasks)
                      for m in g.members) == [50_000, 50_000]
    finally:
        first.close()
        second.close()
