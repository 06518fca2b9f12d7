"""The three-node cluster harness itself (cluster.py): replication as configured, and
kill/restart moving a partition's leadership and a transaction coordinator."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


def _admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def test_replicated_as_configured(kafka_cluster):
    from confluent_kafka.admin import ConfigResource, NewTopic

    admin = _admin(kafka_cluster)
    # replication_factor -1: the cluster's default.replication.factor.
    admin.create_topics([NewTopic("harness", 3, -1)])["harness"].result(30)
    kafka_cluster.wait_in_sync(["harness"])
    for p in range(3):
        part = kafka_cluster.partition("harness", p)
        assert sorted(part.replica_nodes) == [1, 2, 3] and sorted(part.isr_nodes) == [1, 2, 3]
    # Leaders spread over the brokers.
    assert len({kafka_cluster.leader("harness", p) for p in range(3)}) > 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, "harness")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2"
    # The transaction state topic, created on the first FindCoordinator, is replicated too.
    kafka_cluster.coordinator("harness-txn")
    kafka_cluster.wait_in_sync(["__transaction_state"])
    state = kafka_cluster.partition("__transaction_state", 0)
    assert sorted(state.replica_nodes) == [1, 2, 3]


def test_kill_and_restart_move_leaders_and_coordinators(kafka_cluster):
    from confluent_kafka.admin import NewTopic

    admin = _admin(kafka_cluster)
    admin.create_topics([NewTopic("harness-kill", 1, -1)])["harness-kill"].result(30)
    kafka_cluster.wait_in_sync(["harness-kill", "__transaction_state"])
    leader = kafka_cluster.leader("harness-kill", 0)
    kafka_cluster.kill(leader)
    kafka_cluster.wait_brokers({1, 2, 3} - {leader})
    moved = kafka_cluster.leader("harness-kill", 0)
    assert moved not in (leader, -1)
    assert leader not in kafka_cluster.partition("harness-kill", 0).isr_nodes
    # No transaction coordinator on the dead node.
    assert kafka_cluster.coordinator("harness-txn-2") != leader
    kafka_cluster.restart(leader)
    kafka_cluster.wait_in_sync(["harness-kill"])
    assert leader in kafka_cluster.partition("harness-kill", 0).isr_nodes
