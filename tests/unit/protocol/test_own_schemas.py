"""The message versions protocol/schemas/ writes in kio's style (kio 0.6.5 has no
schema for them): each decodes golden bytes and encodes them back byte for byte. The
golden bytes were written by Kafka 4.4.0's own generated message classes
(kafka-clients-4.4.0.jar, ``Message.write`` at the version) for the values below."""

from __future__ import annotations

import io

import pytest
from kio.serial import entity_reader, entity_writer
from txbroker.protocol.messages import request_class, request_module, response_class

GOLDEN = {
    # AcceptableRecoveryLag 10000 (int64) after TaskOffsetIntervalMs 60000; status 6
    # ("x"); active tasks 0:[0, 1], standby [], warm-up null; TopologyDescriptionRequired.
    ("response", 88): "00000000000000036d3100000003000013880000ea600000000000002710020602780002"
                      "023003000000000000000100010001000000020000",
    ("request", 88): "04617070036d31000000000000000000000000753001000000010202300203696e010101"
                     "010100000101010270ff02057a6f6e6502610000000000",
    ("request", 89): "0204617070000100",
    # A group with a topology description (AVAILABLE) and assignor "sticky", and one
    # with an error (null description, NOT_REQUESTED, null assignor).
    ("response", 89): "00000000030000000461707006456d7074790000000100000001ff018000000001020230"
                      "0304737263010203696e000102027000027002010002027301000002026b0301046f7574"
                      "0101000270020100020273010000000307737469636b79000045036e6f02780544656164"
                      "ffffffffffffffffff0180000000ff00000000",
}


@pytest.mark.parametrize("entity, api_key", sorted(GOLDEN))
def test_v1_round_trips_kafkas_bytes(entity, api_key):
    cls = (request_class if entity == "request" else response_class)(api_key, 1)
    assert cls.__version__ == 1
    golden = bytes.fromhex(GOLDEN[entity, api_key])
    message, size = entity_reader(cls)(golden, 0)
    assert size == len(golden)
    out = io.BytesIO()
    entity_writer(cls)(out, message)
    assert out.getvalue() == golden


def test_the_fields_v1_adds():
    hb, _ = entity_reader(response_class(88, 1))(bytes.fromhex(GOLDEN["response", 88]), 0)
    assert (hb.acceptable_recovery_lag, hb.topology_description_required,
            hb.heartbeat_interval.total_seconds(), hb.warmup_tasks) == (10000, True, 5.0, None)
    assert [(t.subtopology_id, t.partitions) for t in hb.active_tasks] == [("0", (0, 1))]
    req, _ = entity_reader(request_class(89, 1))(bytes.fromhex(GOLDEN["request", 89]), 0)
    assert (req.group_ids, req.include_topology_description) == (("app",), True)
    described, _ = entity_reader(response_class(89, 1))(bytes.fromhex(GOLDEN["response", 89]), 0)
    ok, failed = described.groups
    assert (ok.topology_description_status, ok.assignor_name) == (3, "sticky")
    (sub,) = ok.topology_description.subtopologies
    assert [(n.name, n.node_type, n.source_topics, n.stores, n.successors)
            for n in sub.nodes] == [("src", 1, ("in",), (), ("p",)), ("p", 2, (), ("s",), ())]
    (store,) = ok.topology_description.global_stores
    assert (store.source.sink_topic, store.processor.name) == ("out", "p")
    assert (failed.error_code, failed.topology_description, failed.assignor_name) == (69, None,
                                                                                     None)
    # The heartbeat request's v1 has v0's fields and nested types.
    hb_request = request_module(88, 1)
    q, _ = entity_reader(hb_request.StreamsGroupHeartbeatRequest)(
        bytes.fromhex(GOLDEN["request", 88]), 0)
    assert q.topology == hb_request.Topology(epoch=1, subtopologies=(q.topology.subtopologies))
    assert [(kv.key, kv.value) for kv in q.client_tags] == [("zone", "a")]
