"""Share groups (KIP-932): sans-IO pieces the share-group shell and the ShareFetch /
ShareAcknowledge handlers drive.

``partition``  SharePartition: one share-partition's in-flight records (acquire,
               acknowledge, release, lock expiry, SPSO), its durable state and recovery.
``results``    its configuration and the plain data it takes and answers.
``inflight``   the sorted runs of in-flight offsets it keeps.
``state``      record states, acknowledge types, state batches and the share
               coordinator's merge of persisted state.
``records``    the ``__share_group_state`` records, byte-compatible with Kafka.
``assignor``   the share-group assignor ("simple").
``group``      share-group membership (ShareGroupHeartbeat), in memory.
``sessions``   share sessions (ShareFetch / ShareAcknowledge epochs).
``persister``  the share-partitions' records in ``__share_group_state`` and their replay.
``stats``      counters of records acquired, acknowledged, expired, dead-lettered (/metrics).
``coordinator`` the async part: drives the above through the coordinator shell.
"""
