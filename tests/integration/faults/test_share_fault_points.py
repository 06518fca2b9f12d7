"""The share-group fault point ``after_share_acknowledge_durable`` (docs/fault-injection.md)
with confluent-kafka's ShareConsumer: the broker crashes, loses power or drops the
answer once a member's acknowledgements are durable and before they are answered.

The guarantees shown: a record whose ACCEPT reached ``__share_group_state`` is never
delivered again, answered or not; a record acquired and not acknowledged comes back
with a higher delivery count."""

from __future__ import annotations

import pytest

from tests.integration.share_progress import wait_start_offset
from tests.integration.test_share_groups import (
    ENABLED,
    ck,
    offsets,
    poll_until,
    produce,
    share_consumer,
)

POINT = "after_share_acknowledge_durable"


@pytest.fixture
def txbroker_config():
    return dict(ENABLED)


def acquire_and_accept_half(txbroker):
    """Six records acquired by one member, the first three ACCEPTed (the point armed
    before the acknowledgements go out); the member and the rest."""
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 6)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True,
                       **{"socket.timeout.ms": "2000"})
    got = poll_until(c, 6)
    assert offsets(got) == list(range(6))
    for m in got[:3]:
        c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
    return c, got[3:]


def commit_unanswered(c) -> None:
    """commit_sync whose answer never comes: an error or a failed partition."""
    try:
        results = c.commit_sync(5)
    except ck.KafkaException:
        return
    assert any(v is not None for v in results.values()) or not results, results


def redelivered_once_more(broker, rest) -> None:
    c2 = share_consumer(broker.bootstrap, "g", "t", explicit=True)
    try:
        back = poll_until(c2, len(rest), timeout=30, ack=_accept)
        assert offsets(back) == offsets(rest), "an ACCEPTed record came back, or one was lost"
        assert {m.delivery_count() for m in back} == {2}
        wait_start_offset(broker, "g", "t", 6, consumer=c2)  # all six decided
    finally:
        c2.close()


def _accept(c, msgs) -> None:
    for m in msgs:
        c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
    c.commit_sync(10)


@pytest.mark.parametrize("action", ["crash", "power_loss"])
def test_an_accept_durable_but_unanswered_survives_a_crash(txbroker, action):
    c, rest = acquire_and_accept_half(txbroker)
    txbroker.faults.arm(POINT, action)
    commit_unanswered(c)
    txbroker.wait_crashed()
    assert txbroker.faults.fired == [POINT]
    txbroker.restart()
    try:
        redelivered_once_more(txbroker, rest)
    finally:
        del c  # its broker is gone; closing would wait for it


def test_an_accept_whose_answer_is_dropped_is_not_delivered_again(txbroker):
    c, rest = acquire_and_accept_half(txbroker)
    txbroker.faults.arm(POINT, "drop")
    commit_unanswered(c)
    assert txbroker.faults.fired == [POINT]
    c.close()  # its records still acquired are released (delivery count 1 -> 2 next)
    redelivered_once_more(txbroker, rest)


def test_a_dropped_share_acknowledge_answer_loses_no_accept(txbroker):
    """The request faults drop a ShareAcknowledge answer (the connection goes silent, the
    client gives up on it after socket.timeout.ms): the ACCEPTs were applied."""
    c, rest = acquire_and_accept_half(txbroker)
    fault = txbroker.faults.add(api="ShareAcknowledge", drop=True, count=1)
    commit_unanswered(c)
    c.close()
    assert fault.fired == 1
    redelivered_once_more(txbroker, rest)


@pytest.mark.parametrize("txbroker_config", [
    {**ENABLED, "group.share.record.lock.duration.ms": "5000"}])
def test_records_of_a_dropped_share_fetch_answer_come_back(txbroker):
    """The first ShareFetch acquires every record and its answer is lost: the member
    never saw them. They come back, delivery count 2, each ACCEPTed once: released at
    once if the client gives up on the silent connection and closes it (the broker
    closes its share session with it), else when their acquisition lock runs out.
    librdkafka does not always close the connection after a timed-out ShareFetch (it
    did in about 2 runs of 3 on a loaded machine), so the lock is 5 s here: the test
    proves the guarantee whichever way the client goes."""
    txbroker.create_topic("t")
    produce(txbroker.bootstrap, "t", 6)
    fault = txbroker.faults.add(api="ShareFetch", drop=True, count=1)
    c = share_consumer(txbroker.bootstrap, "g", "t", explicit=True,
                       **{"socket.timeout.ms": "2000"})
    try:
        got = poll_until(c, 6, timeout=20, ack=_accept)
        assert fault.fired == 1
        assert offsets(got) == list(range(6))
        assert {m.delivery_count() for m in got} == {2}
        wait_start_offset(txbroker, "g", "t", 6, consumer=c)
    finally:
        c.close()
