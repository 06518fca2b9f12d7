"""StreamsGroupDescribeRequest v1 (Kafka 4.4's StreamsGroupDescribeRequest.json): v0 and
IncludeTopologyDescription (KIP-1331)."""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.streams_group_describe.v0 import request as v0
from kio.static.primitive import i16


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeRequest(v0.StreamsGroupDescribeRequest):
    __version__: ClassVar[i16] = i16(1)
    include_topology_description: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Whether to include the full topology description from the topology description
    plugin in the response."""
