"""StreamsGroupHeartbeatRequest v1 (Kafka 4.4's StreamsGroupHeartbeatRequest.json): the
fields of v0; the version tells the broker that the client reads response v1
(TopologyDescriptionRequired, the MISSING_CLIENT_TAGS status)."""

from dataclasses import dataclass
from typing import ClassVar

from kio.schema.streams_group_heartbeat.v0 import request as v0
from kio.schema.streams_group_heartbeat.v0.request import (  # noqa: F401  (the nested types)
    CopartitionGroup,
    Endpoint,
    KeyValue,
    Subtopology,
    TaskIds,
    TaskOffset,
    TopicInfo,
    Topology,
)
from kio.static.primitive import i16


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatRequest(v0.StreamsGroupHeartbeatRequest):
    __version__: ClassVar[i16] = i16(1)
