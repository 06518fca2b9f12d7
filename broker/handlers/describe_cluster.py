"""DescribeCluster (key 60)."""

from __future__ import annotations

import datetime

from txbroker.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKERS_ENDPOINT = 1
_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    schema = ctx.schema
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        return build(ctx.response_type, throttle_time=_ZERO,
                     error_code=ErrorCode.unsupported_endpoint_type,
                     error_message="this node answers only for the brokers endpoint type",
                     endpoint_type=endpoint_type, cluster_id=broker.cluster_id,
                     controller_id=-1, brokers=(), cluster_authorized_operations=-2147483648)
    operations = -2147483648
    if request.include_cluster_authorized_operations:
        # KIP-430: 0 without DESCRIBE on the cluster (Kafka's AuthHelper).
        operations = (ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                      if ctx.authorize_cluster(AclOperation.DESCRIBE) else 0)
    host, port = broker.advertised_for(ctx.session.listener_name)
    brokers = (build(schema.DescribeClusterBroker, broker_id=broker.node_id, host=host, port=port,
                     rack=None, is_fenced=False),)
    return build(ctx.response_type, throttle_time=_ZERO, error_code=ErrorCode.none,
                 error_message=None, endpoint_type=BROKERS_ENDPOINT, cluster_id=broker.cluster_id,
                 controller_id=broker.node_id, brokers=brokers,
                 cluster_authorized_operations=operations)
