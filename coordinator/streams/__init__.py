"""Streams groups (KIP-1071, ``group.protocol=streams``): the sans-IO parts of the
streams group coordinator, following Kafka 4.4. No I/O and no clock: every operation
takes ``now_ms`` and the topics as a :data:`~topology.TopicImage` and returns plain
results plus the records to persist.

``topology``   the topology a client describes (subtopologies, source / repartition /
               changelog topics, copartition groups) and its configuration against the
               topics: repartition and changelog partition counts, copartitioning,
               internal topics to create, and the heartbeat's status codes.
``assignor``   the default task assignor, "sticky" (active + standby tasks; Kafka 4.4
               assigns no warm-up tasks).
``reconcile``  moving one member towards its target assignment: a task is handed over
               only once its previous owner revoked it.
``group``      one streams group: persisted state, replay of its records, leave, fencing,
               session / rebalance timeouts, describe.
``heartbeat``  StreamsGroupHeartbeat for one group (request checks, join, static
               membership, topology, target assignment, reconciliation).
``groups``     every streams group of a coordinator: routes the operations by group id.
``records``    the StreamsGroup* records of ``__consumer_offsets``, byte-compatible with
               Kafka (``wire`` holds the flexible-version field codecs).
``results``    configuration, the heartbeat request and the results.
``offsets``    OffsetCommit / TxnOffsetCommit / OffsetFetch checks of a member's epoch.

Wiring (the StreamsGroupHeartbeat (88) / StreamsGroupDescribe (89) handlers in
broker/handlers/ and the group coordinator's part in
``coordinator/group/streams_coordinator.py``) uses :class:`groups.StreamsGroups` only;
``offsets`` checks the offset commits and fetches of a group's members:

* Heartbeat: decode the request into :class:`results.StreamsHeartbeat` (task lists as
  ``frozenset`` of ``(subtopology id, partition)``, the topology as
  :class:`topology.StreamsTopology`, ``client_id`` / ``client_host`` from the request
  context), build the topic image ``{name: partition count}`` from the metadata, and call
  ``groups.heartbeat(hb, topics, now_ms)`` on the coordinator's loop. Append
  ``result.records`` (encode each with :func:`records.encode_record`) to the group's
  ``__consumer_offsets`` partition and answer only once they are durable. If the append
  fails, the group's in-memory state is ahead of the log: reload the partition (replay)
  before serving it again, as after a crash. Then, if ``result.internal_topics_to_create``
  is not empty, create those topics (partitions, replication factor -1 = default,
  configs) in the background as Kafka's broker does (not awaited; the next heartbeat
  sees them in the topic image). Encode the response from the result: ``error`` /
  ``message``; ``member_epoch``; ``heartbeat_interval_ms``; ``task_offset_interval_ms``;
  ``statuses`` (Status list; MISSING_CLIENT_TAGS is never produced); ``assignment``
  (None: the three task lists null); EndpointInformationEpoch and PartitionsByUserEndpoint
  are not computed here (send epoch 0 and null).
* Large assignments: a result with ``assignment_input`` is no answer yet and changed
  nothing; compute ``assignor.compute_target(result.assignment_input)`` off the event
  loop (a pure function of that snapshot) and call ``groups.heartbeat`` again with
  ``precomputed=(input, target)``: it is used if the group's input is still the same,
  else a new ``assignment_input`` comes back. Hold the group meanwhile (its other
  heartbeats wait, ``expire`` and ``next_deadline_ms`` skip it).
* Timers: after each operation schedule a wake-up at ``groups.next_deadline_ms()``; on
  wake-up call ``groups.expire(now_ms)`` and persist each group's ``records``; an
  ``assignment_input`` there (an ended initial rebalance delay's large assignment) is
  computed off the loop and given to ``groups.assign_delayed`` (its records, or the
  group's new input to compute in turn).
* Loading a ``__consumer_offsets`` partition: for each record whose key's int16 type is in
  :data:`records.RECORD_TYPES`, ``groups.replay(*records.decode_record(key, value))`` in
  log order (a ValueError: skip the record with a log line), then
  ``groups.on_loaded(now_ms)``.
* Describe: ``groups.describe(group_ids)`` (None: GROUP_ID_NOT_FOUND); DeleteGroups of an
  EMPTY group: ``groups.delete(group_id)`` returns the tombstones to persist.
* Group configs: ``StreamsGroups(config_for)`` where ``config_for(group_id)`` returns a
  :class:`results.StreamsGroupConfig` (broker defaults ``group.streams.*`` overridden by
  the group's ``streams.session.timeout.ms`` / ``streams.heartbeat.interval.ms`` /
  ``streams.num.standby.replicas`` / ``streams.task.offset.interval.ms``).
* A group id is one group type: the shell answers a StreamsGroupHeartbeat for a classic,
  consumer or share group's id with GROUP_ID_NOT_FOUND, as Kafka does.
"""
