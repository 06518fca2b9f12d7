"""StreamsGroupDescribeResponse v1 (Kafka 4.4's StreamsGroupDescribeResponse.json): each
group adds TopologyDescription, TopologyDescriptionStatus (KIP-1331) and AssignorName."""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.streams_group_describe.v0 import response as v0
from kio.schema.streams_group_describe.v0.response import (  # noqa: F401  (nested types)
    Assignment,
    Endpoint,
    KeyValue,
    Member,
    Subtopology,
    TaskIds,
    TaskOffset,
    TopicInfo,
    Topology,
)
from kio.schema.types import TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32Timedelta


class _Nested:
    """What kio's generated nested classes each declare (v1's new types share it)."""

    __slots__ = ()
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionNode(_Nested):
    name: str = field(metadata={"kafka_type": "string"})
    node_type: i8 = field(metadata={"kafka_type": "int8"})
    """1 SOURCE, 2 PROCESSOR, 3 SINK."""
    source_topics: tuple[TopicName, ...] = field(metadata={"kafka_type": "string"}, default=())
    sink_topic: TopicName | None = field(metadata={"kafka_type": "string"}, default=None)
    stores: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    successors: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionSubtopology(_Nested):
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    nodes: tuple[TopologyDescriptionNode, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionGlobalStore(_Nested):
    source: TopologyDescriptionNode
    processor: TopologyDescriptionNode


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescription(_Nested):
    subtopologies: tuple[TopologyDescriptionSubtopology, ...]
    global_stores: tuple[TopologyDescriptionGlobalStore, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup(v0.DescribedGroup):
    __version__: ClassVar[i16] = i16(1)
    topology_description: TopologyDescription | None = field(default=None)
    """Non-null if and only if TopologyDescriptionStatus is AVAILABLE (3)."""
    topology_description_status: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    """0 NOT_REQUESTED, 1 NOT_STORED, 2 ERROR, 3 AVAILABLE."""
    assignor_name: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The task assignor of the group's next assignment; null for a describe error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(89)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    groups: tuple[DescribedGroup, ...]
