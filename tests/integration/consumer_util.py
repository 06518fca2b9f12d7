"""Helpers of the KIP-848 consumer-protocol tests (integration and differential):
confluent-kafka consumers with ``group.protocol=consumer`` polled in turn."""

from __future__ import annotations

import time


def owned(c) -> set[int]:
    """The partition numbers a confluent-kafka consumer has been assigned."""
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers, predicate, timeout: float = 30, sink=None) -> bool:
    """Poll every consumer in turn (they only act on their assignment while polled)
    until ``predicate()``; records go to ``sink`` if given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and sink is not None and m.error() is None:
                sink.append(m)
        if predicate():
            return True
    return False


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """CreateTopics with confluent-kafka's AdminClient, waiting for the answer."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
