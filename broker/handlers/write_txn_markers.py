"""WriteTxnMarkers (key 27): write COMMIT/ABORT markers into partitions. Kafka's
coordinator sends it to partition leaders; here the coordinator writes markers
in-process, and this API serves the KIP-664 abort path for hanging transactions
(`txbroker transactions abort`, Admin.abortTransaction). v2 (KIP-1228) carries
each marker's transaction version: at 2 a partition refuses a marker whose epoch
is not above the producer's there while a transaction is open."""

from __future__ import annotations

from txbroker.coordinator.transaction.markers import write_markers
from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    schema = ctx.schema
    out = []
    # Kafka: ALTER on the cluster, else CLUSTER_ACTION (the inter-broker permission);
    # without either every partition is CLUSTER_AUTHORIZATION_FAILED and nothing is
    # written: a client cannot abort (or commit) someone else's transaction.
    allowed = ctx.authorize_cluster(AclOperation.ALTER, log_denied=False) or \
        ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    for marker in request.markers:
        if not allowed:
            out.append(_result(schema, marker, lambda _t, _p: ErrorCode.cluster_authorization_failed))
            continue
        partitions = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        results = await write_markers(broker.logs, broker.groups, marker.producer_id,
                                      marker.producer_epoch, bool(marker.transaction_result),
                                      partitions, marker.coordinator_epoch,
                                      getattr(marker, "transaction_version", 0))
        out.append(_result(schema, marker, lambda t, p, r=results: r[(t, p)]))
    return build(ctx.response_type, markers=tuple(out))


def _result(schema, marker, error_of):
    topics = tuple(
        build(schema.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
            build(schema.WritableTxnMarkerPartitionResult, partition_index=p,
                  error_code=error_of(t.name, p))
            for p in t.partition_indexes))
        for t in marker.topics)
    return build(schema.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=topics)
