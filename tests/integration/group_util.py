"""Shared by the consumer-group tests: broker config, a steady producer, and the
reading of a group's history (events of group_worker members) against what
Kafka guarantees."""

from __future__ import annotations

import threading
import time
import uuid

from tests.helpers import wait_until

from .group_worker import Events, MemberProcess

GROUP_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
    "group.min.session.timeout.ms": "1000",
}


def unique_group(topic: str) -> str:
    return f"group-{topic}-{uuid.uuid4().hex[:6]}"


# --- a steady producer --------------------------------------------------------------------


class Feed:
    """Produces "0", "1", "2", ... round-robin over the partitions from a thread at a
    steady pace (acks=all) and remembers where each record landed."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 200,
                 **producer_config) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.interval = 1 / rate
        self.produced: dict[tuple[int, int], str] = {}
        self.errors: list[str] = []
        self.config = {"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all",
                       **producer_config}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="feed")

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self.config)

        def report(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.produced[(msg.partition(), msg.offset())] = msg.value().decode()

        i = 0
        deadline = time.monotonic() + 180
        next_at = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < deadline:
            producer.produce(self.topic, value=str(i).encode(), partition=i % self.partitions,
                             on_delivery=report)
            i += 1
            next_at += self.interval
            producer.poll(max(0.0, next_at - time.monotonic()))
        remaining = producer.flush(20)
        if remaining:
            self.errors.append(f"{remaining} record(s) not delivered")

    def start(self) -> Feed:
        self._thread.start()
        return self

    def abort(self) -> None:
        self._stop.set()

    def stop(self) -> dict[tuple[int, int], str]:
        self._stop.set()
        self._thread.join(40)
        assert not self._thread.is_alive(), "producer did not stop"
        assert not self.errors, self.errors
        return dict(self.produced)

    def end_offsets(self) -> dict[int, int]:
        ends = dict.fromkeys(range(self.partitions), 0)
        for p, o in self.produced:
            ends[p] = max(ends[p], o + 1)
        return ends


# --- reading the history of a group ------------------------------------------------------------


def ownership(events: list[dict], gone: set[str]) -> dict[str, set[int]]:
    """Partitions each live member owns according to its rebalance callbacks."""
    own: dict[str, set[int]] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        m = e["member"]
        if e["kind"] == "assign":
            own[m] = set(e["partitions"])
        elif e["kind"] == "revoke":
            own[m] = own.get(m, set()) - set(e["partitions"])
        elif e["kind"] in ("closing", "closed", "error"):
            own[m] = set()
    return {m: s for m, s in own.items() if s and m not in gone}


def errors_of(events: list[dict]) -> list[dict]:
    return [e for e in events if e["kind"] == "error"]


class History:
    """Events of the thread members plus those of member processes."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.processes: list[MemberProcess] = []
        self.gone: set[str] = set()  # killed members

    def all(self) -> list[dict]:
        out = self.events.snapshot()
        for p in self.processes:
            out += p.events()
        return sorted(out, key=lambda e: e["t"])

    def wait_stable(self, members: set[str], partitions: int, timeout: float = 30) -> float:
        """Wait until exactly ``members`` own partitions, disjointly, covering all of
        them; return the time of the last assignment that made it so."""
        deadline = time.monotonic() + timeout
        own: dict[str, set[int]] = {}
        while time.monotonic() < deadline:
            evs = self.all()
            assert not errors_of(evs), errors_of(evs)
            own = ownership(evs, self.gone)
            if set(own) == members:
                owned = [p for s in own.values() for p in s]
                if sorted(owned) == list(range(partitions)):  # disjoint and complete
                    return max(e["t"] for e in evs
                               if e["kind"] == "assign" and e["member"] in members)
            time.sleep(0.05)
        raise AssertionError(f"no stable assignment for {sorted(members)} in {timeout}s: {own}")

    def wait_commits(self, member: str, after: float, count: int = 1, timeout: float = 20) -> None:
        def enough() -> bool:
            return sum(1 for e in self.all() if e["member"] == member and e["kind"] == "commit"
                       and e["t"] > after) >= count
        assert wait_until(enough, timeout), f"{member} made no {count} commit(s) in {timeout}s"


def check_history(events: list[dict], produced: dict[tuple[int, int], str]) -> dict:
    """What Kafka guarantees to a consumer group that commits after processing:

    * nothing is lost: every produced record was delivered, with its value;
    * a record is delivered again only to a member that got its partition in a
      later assignment (never twice within one), and only if no commit covering
      it (offset > record's) had been acknowledged before that assignment: what
      was processed and committed before a rebalance is never redelivered, and
      what a crashed member processed after its last commit may be (at least once).
    """
    deliveries: dict[tuple[int, int], list[tuple[float, str, str]]] = {}
    assigns: dict[str, list[tuple[float, set[int]]]] = {}
    commits: dict[int, list[tuple[float, int]]] = {}
    for e in events:
        if e["kind"] == "deliver":
            for p, o, v in e["records"]:
                deliveries.setdefault((p, o), []).append((e["t"], e["member"], v))
        elif e["kind"] == "assign":
            assigns.setdefault(e["member"], []).append((e["t"], set(e["partitions"])))
        elif e["kind"] == "commit":
            for p, o in e["offsets"].items():
                commits.setdefault(int(p), []).append((e["t"], o))

    lost = sorted(set(produced) - set(deliveries))
    assert not lost, f"{len(lost)} record(s) never delivered, e.g. {lost[:10]}"
    wrong = [(po, v, produced.get(po)) for po, ds in deliveries.items() for _t, _m, v in ds
             if produced.get(po) != v]
    assert not wrong, f"records delivered with the wrong value: {wrong[:10]}"

    violations = []
    redelivered = 0
    for (p, o), ds in deliveries.items():
        ds.sort()
        for (t1, m1, _v1), (t2, m2, _v2) in zip(ds, ds[1:], strict=False):
            redelivered += 1
            owned_since = [t for t, parts in assigns.get(m2, []) if t <= t2 and p in parts]
            if not owned_since:
                violations.append(f"{m2} read {p}@{o} without owning partition {p}")
                continue
            t_assign = max(owned_since)
            if t_assign <= t1:
                violations.append(f"{p}@{o} read by {m1} then by {m2} within one assignment")
                continue
            covering = [(t, c) for t, c in commits.get(p, []) if c > o and t < t_assign]
            if covering:
                violations.append(
                    f"{p}@{o} read by {m1}, committed (offset {covering[0][1]}) before {m2} "
                    f"was assigned partition {p}, and read again by {m2}")
    assert not violations, f"{len(violations)} violation(s): {violations[:10]}"
    return {"delivered": len(deliveries), "redelivered": redelivered}
