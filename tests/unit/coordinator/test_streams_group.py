"""A stateful model of a streams group (KIP-1071): Kafka Streams clients join with a
topology, heartbeat, apply their assignment (acknowledging revocations), leave, crash
and time out; a static member leaves with -2 and rejoins under a new member id; the
coordinator crashes and is rebuilt from its encoded records; the group's initial
rebalance delay and assignment interval change; assignments are computed off the
"event loop" (every one, in that mode): the heartbeat or the ended initial delay is
run again with the result, offered with a stale result of an earlier input first, and
a delayed one lands only after other operations ran. Invariants: an active task
is held by at most one member (the coordinator's view and what live clients run), a
standby never sits on the process running the active task, a stable group with
members runs every task, epochs never go back, no member holds a task while the
initial rebalance delay runs, two assignments are at least the assignment interval
apart, and a rebuilt group equals the one that wrote the records."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from txbroker.coordinator.streams import records as R
from txbroker.coordinator.streams.assignor import compute_target
from txbroker.coordinator.streams.group import STABLE_GROUP
from txbroker.coordinator.streams.groups import StreamsGroups
from txbroker.coordinator.streams.reconcile import EMPTY_TASKS, TasksTuple
from txbroker.coordinator.streams.results import StreamsGroupConfig, StreamsHeartbeat
from txbroker.coordinator.streams.topology import (
    StreamsTopology,
    Subtopology,
    TopicInfo,
    configure_topics,
)

GROUP = "app"
SESSION = 1_000
CLIENTS = 4
STATIC = 3  # client 3 uses static membership
PROCESS = ["pA", "pA", "pB", "pC"]  # clients 0 and 1 are two threads of one instance
TOPOLOGY = StreamsTopology(1, (
    Subtopology("0", ("in",), repartition_sink_topics=("app-rep",)),
    Subtopology("1", ("side",), state_changelog_topics=(TopicInfo("app-store-changelog"),),
                repartition_source_topics=(TopicInfo("app-rep"),)),
))


@dataclass
class Client:
    index: int
    member_id: str | None = None
    incarnation: int = 0
    epoch: int = 0
    owned: TasksTuple = EMPTY_TASKS  # what the client runs
    pending: TasksTuple | None = None  # an assignment it received and has not applied
    left_static: bool = False
    seen: dict = field(default_factory=dict)
    endpoint_epoch: int = 0  # the endpoint information epoch it last got the endpoints at

    def drop_all(self) -> None:
        self.epoch, self.owned, self.pending = 0, EMPTY_TASKS, None


class StreamsGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = StreamsGroupConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=100,
                                         num_standby_replicas=1, initial_rebalance_delay_ms=300,
                                         assignment_interval_ms=200)
        self.groups = StreamsGroups(lambda _gid: self.config)
        self.last_assignment = 0  # the last target assignment's timestamp (0: none)
        self.now = 0
        self.log: list[tuple[bytes, bytes | None]] = []
        self.topics = {"in": 3, "side": 2}
        self.to_create: dict[str, int] = {}
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.member_epochs: dict[str, int] = {}
        self.group_epochs = (0, 0)
        self.stale = None  # the last result computed off the loop (its input may be old)
        self.delayed = None  # the input of an ended initial delay's assignment in flight

    def _record(self, records) -> None:
        self.log.extend(R.encode_record(r) for r in records)

    def _send(self, c: Client, epoch: int, owned: TasksTuple | None, **kw):
        hb = StreamsHeartbeat(
            GROUP, c.member_id or "", epoch,
            instance_id=f"static-{c.index}" if c.index == STATIC else None,
            rebalance_timeout_ms=SESSION if epoch == 0 else -1,
            topology=TOPOLOGY if epoch == 0 else None,
            active_tasks=None if owned is None else owned.active,
            standby_tasks=None if owned is None else owned.standby,
            warmup_tasks=None if owned is None else owned.warmup,
            process_id=PROCESS[c.index] if epoch == 0 else None, client_id=f"c{c.index}",
            # Clients 0 and 2 serve interactive queries (application.server).
            user_endpoint=(f"h{c.index}", 9000) if epoch == 0 and c.index % 2 == 0 else None,
            endpoint_information_epoch=c.endpoint_epoch, **kw)
        precomputed = self.stale  # used only if its input is the group's now
        while True:
            r = self.groups.heartbeat(hb, self.topics, self.now, precomputed)
            if r.assignment_input is None:
                break
            assert not r.records and not r.error
            precomputed = self.stale = (r.assignment_input, compute_target(r.assignment_input))
        self._record(r.records)
        if r.partitions_by_endpoint is not None:
            self._check_endpoints(r.partitions_by_endpoint)
            c.endpoint_epoch = r.endpoint_information_epoch
        for t in r.internal_topics_to_create:
            self.to_create[t.name] = t.partitions
        return r

    def _group(self):
        return self.groups.get(GROUP)

    def _check_endpoints(self, endpoints) -> None:
        """PartitionsByUserEndpoint: the members with an endpoint, each once, with the
        partitions of their current tasks; no active partition twice."""
        g = self._group()
        with_endpoint = [m.user_endpoint for m in g.p.members.values() if m.user_endpoint]
        assert sorted((e.host, e.port) for e in endpoints) == sorted(with_endpoint)
        active = [(t, p) for e in endpoints for t, ps in e.active for p in ps]
        assert len(active) == len(set(active)), endpoints

    # -- rules ---------------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1))
    def join(self, i: int) -> None:
        c = self.clients[i]
        if c.member_id is not None and c.epoch != 0:
            return
        if c.member_id is None:
            c.incarnation += 1
            c.member_id = f"m{i}-{c.incarnation}"
        r = self._send(c, 0, EMPTY_TASKS)  # a joining client sends empty task lists
        if r.error:
            assert r.error == 111, r  # UNRELEASED_INSTANCE_ID: the static id is still held
            c.member_id = None
            return
        c.epoch, c.pending = r.member_epoch, r.assignment
        c.left_static = False

    @rule(i=st.integers(0, CLIENTS - 1), ack=st.booleans(), report=st.booleans())
    def heartbeat(self, i: int, ack: bool, report: bool) -> None:
        """``ack``: the client applies the assignment it got (stops revoked tasks, starts
        new ones) first; ``report``: it sends its owned tasks (else "unchanged")."""
        c = self.clients[i]
        if c.member_id is None or c.left_static:
            return
        if c.epoch == 0:
            self.join(i)
            return
        if ack and c.pending is not None:
            c.owned, c.pending = c.pending, None
        # A reporting client sends its tasks' offsets too (its state on disk; the
        # assignor ranks standby candidates by them).
        offsets = tuple((s, q, 100 * c.index + q) for s, q in sorted(
            c.owned.active | c.owned.standby)) if report else None
        r = self._send(c, c.epoch, c.owned if report or ack else None, task_offsets=offsets)
        if r.error:
            assert r.error in (25, 110), r  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
            c.drop_all()  # Streams closes its tasks and rejoins under its member id
            return
        c.epoch = r.member_epoch
        if r.assignment is not None:
            c.pending = r.assignment

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i: int) -> None:
        c = self.clients[i]
        if c.member_id is None or c.epoch == 0 or c.left_static:
            return
        static = c.index == STATIC
        r = self._send(c, -2 if static else -1, None)
        c.drop_all()  # the client closed its tasks before leaving
        if r.error:
            assert r.error in (25, 82), r  # UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID
            c.member_id = None
            return
        if static:
            c.left_static = True
        else:
            c.member_id = None

    @rule(i=st.integers(0, CLIENTS - 1))
    def restart(self, i: int) -> None:
        """The client process dies without leaving (or a static one comes back after
        -2): it returns with a new member id; the coordinator learns by timeout."""
        c = self.clients[i]
        c.drop_all()
        c.member_id, c.left_static = None, False
        self.join(i)

    @rule(ms=st.integers(0, 1_500))
    def tick(self, ms: int) -> None:
        self.now += ms
        for e in self.groups.expire(self.now).values():
            self._record(e.records)
            if e.assignment_input is not None:
                self.delayed = e.assignment_input

    @precondition(lambda self: self.delayed is not None)
    @rule()
    def land_delayed_assignment(self) -> None:
        """The delayed assignment computed off the loop lands (whatever ran meanwhile:
        the shell holds the group, the state machine must not rely on it)."""
        snapshot = self.delayed
        records, self.delayed = self.groups.assign_delayed(
            GROUP, (snapshot, compute_target(snapshot)), self.now)
        self._record(records)

    @rule(on=st.booleans())
    def set_offload(self, on: bool) -> None:
        """Every assignment computed off the loop, or none (the default threshold is
        far above this group's)."""
        self.config = replace(self.config, offload_min_work=0 if on else 100_000)

    @rule(n=st.integers(0, 2))
    def set_num_standby_replicas(self, n: int) -> None:
        """The group config changes (IncrementalAlterConfigs): a new assignment follows."""
        self.config = replace(self.config, num_standby_replicas=n)

    @rule(delay=st.sampled_from([0, 300, 3000]), interval=st.sampled_from([0, 200, 1000]))
    def set_delays(self, delay: int, interval: int) -> None:
        """streams.initial.rebalance.delay.ms and streams.assignment.interval.ms change."""
        self.config = replace(self.config, initial_rebalance_delay_ms=delay,
                              assignment_interval_ms=interval)
        self.last_assignment = 0

    @rule(i=st.integers(0, CLIENTS - 1))
    def request_shutdown(self, i: int) -> None:
        c = self.clients[i]
        if c.member_id is None or c.epoch == 0 or c.left_static:
            return
        r = self._send(c, c.epoch, None, shutdown_application=True)
        if r.error == 0:
            assert any(s.code == 4 for s in r.statuses), r  # SHUTDOWN_APPLICATION
            c.epoch = r.member_epoch
            if r.assignment is not None:
                c.pending = r.assignment
        else:
            c.drop_all()

    @precondition(lambda self: self.to_create)
    @rule()
    def create_internal_topics(self) -> None:
        self.topics.update(self.to_create)
        self.to_create.clear()

    @rule()
    def coordinator_crash(self) -> None:
        """SIGKILL and reload: the group from its records, timers re-armed."""
        before = self._group()
        rebuilt = StreamsGroups(lambda _gid: self.config)
        for key, value in self.log:
            rebuilt.replay(*R.decode_record(key, value))
        after = rebuilt.get(GROUP)
        if before is None:
            assert after is None
            return
        assert after is not None
        assert after.persisted_view() == before.persisted_view()
        assert after.state == before.state
        # A compacted log too: the last value of each key, at that write's position.
        compacted: dict = {}
        for k, v in self.log:
            key, value = R.decode_record(k, v)
            compacted.pop(key, None)
            compacted[key] = value
        again = StreamsGroups(lambda _gid: self.config)
        for key, value in compacted.items():
            again.replay(key, value)
        assert again.groups[GROUP].persisted_view() == before.persisted_view()
        rebuilt.on_loaded(self.now)
        self.groups = rebuilt

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def one_active_owner_per_task(self) -> None:
        g = self._group()
        if g is None:
            return
        owner: dict = {}
        for mid, c in g.p.current.items():
            for t in c.assigned.active | c.pending_revocation.active:
                assert t not in owner, (t, owner.get(t), mid)
                owner[t] = mid
        # What live members' clients actually run (a fenced client is a zombie).
        running: dict = {}
        for cl in self.clients:
            if cl.member_id is None or cl.member_id not in g.p.members:
                continue
            for t in cl.owned.active:
                assert t not in running, (t, running.get(t), cl.member_id)
                running[t] = cl.member_id

    @invariant()
    def no_tasks_during_the_initial_delay(self) -> None:
        """A member joined the group while it was Empty: nobody gets tasks before the
        delay ends."""
        g = self._group()
        if g is None or g.initial_delay_deadline is None:
            return
        for c in g.p.current.values():
            assert c.assigned == EMPTY_TASKS and c.pending_revocation == EMPTY_TASKS, c
        assert all(t == EMPTY_TASKS for t in g.p.target.values())

    @invariant()
    def assignments_are_an_interval_apart(self) -> None:
        g = self._group()
        if g is None:
            return
        stamp = g.p.assignment_timestamp  # 0 once the last member left: no interval
        if stamp and stamp != self.last_assignment and self.last_assignment:
            assert stamp >= self.last_assignment + self.config.assignment_interval_ms
        self.last_assignment = stamp

    @invariant()
    def task_offsets_only_of_members(self) -> None:
        g = self._group()
        if g is not None:
            assert g.task_offsets.keys() <= g.p.members.keys()

    @invariant()
    def standby_never_with_its_active(self) -> None:
        g = self._group()
        if g is None:
            return
        active, standby = set(), set()
        for mid, c in g.p.current.items():
            pid = g.p.members[mid].process_id
            active |= {(t, pid) for t in c.assigned.active | c.pending_revocation.active}
            standby |= {(t, pid) for t in c.assigned.standby | c.pending_revocation.standby}
        assert not active & standby, active & standby

    @invariant()
    def stable_group_runs_every_task(self) -> None:
        g = self._group()
        if g is None or g.state != STABLE_GROUP:
            return
        configured = configure_topics(TOPOLOGY, self.topics)
        assert configured.is_ready
        assigned = set().union(*(c.assigned.active for c in g.p.current.values()))
        assert assigned == set(configured.all_tasks())
        assert g.p.target.keys() == g.p.members.keys()

    @invariant()
    def epochs_never_go_back(self) -> None:
        g = self._group()
        if g is None:
            return
        assert g.p.assignment_epoch <= g.p.group_epoch
        epochs = (g.p.group_epoch, g.p.assignment_epoch)
        assert epochs >= self.group_epochs or epochs[0] > self.group_epochs[0]
        assert epochs[0] >= self.group_epochs[0] and epochs[1] >= self.group_epochs[1]
        self.group_epochs = epochs
        for mid, c in g.p.current.items():
            if c.member_epoch >= 0:
                assert c.member_epoch >= self.member_epochs.get(mid, 0)
                assert c.member_epoch <= g.p.assignment_epoch
                self.member_epochs[mid] = c.member_epoch
            for _t, e in c.active_epochs:
                assert e <= max(c.member_epoch, 0)


StreamsGroupMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestStreamsGroupMachine = StreamsGroupMachine.TestCase
