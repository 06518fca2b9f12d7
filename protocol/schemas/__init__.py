"""Message versions kio (our schema library, 0.6.5) has no schema for, written here in
kio's style (frozen dataclasses with ``kafka_type`` field metadata, one module per
request or response) from Kafka 4.4's message JSONs, so that kio's readers and writers
serve them like its own. ``protocol/messages.py`` finds them through :data:`OWN_SCHEMAS`.
tests/unit/protocol/test_own_schemas.py checks their bytes against Kafka's layout."""

# (API key, version) -> the module prefix of its request and response modules.
OWN_SCHEMAS: dict[tuple[int, int], str] = {
    (88, 1): "streams_group_heartbeat_v1",
    (89, 1): "streams_group_describe_v1",
}
