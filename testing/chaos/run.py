"""``txbroker chaos`` / ``txbroker.chaos.run(...)``: run the user's pipeline against a
broker under fire, then check its output (docs/testing-your-pipeline.md).

A broker process is started (admin endpoint on, for faults), the input and output
topics created, the input fed with uniquely keyed records (and records of aborted
transactions, which no read_committed pipeline may pass on). For ``duration`` seconds
pipeline instances are SIGKILLed and restarted, the broker crashed (SIGKILL) or made
to lose power at a commit-protocol point and restarted, and request faults injected
from a profile; and (events.py) the broker restarted cleanly or hung for a moment, and
instances paused, replaced and resumed as zombies beside their replacements. Then,
faults off, the run waits for quiescence judged by progress (the group's committed
offsets reach the input's end, no zombie left; no progress for ``stall_timeout`` is a
stall, reported with its reason) and checks the output (checker.py). Needs
confluent-kafka (the feeder and the read_committed reader).
Instead of the built-in feeder, the user's ``generator`` command can feed the input
(generator.py); ``mapping`` says which input an output record came from (mapping.py).
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..broker_process import BrokerProcess
from . import events
from .checker import Read, Report, check
from .generator import Generator
from .history import read_log
from .mapping import ChaosRecord, IdOf, Mapping, inputs_of, key_id, parse_mapping
from .supervisor import Instances

POWER_LOSS_POINTS = ("after_prepare_durable", "before_markers", "after_first_marker",
                     "before_complete")
COUNTED = ("instance kill", "instance exit", "broker crash", "power loss", "broker restart",
           "request fault", "feeder restart", "generator restart", *events.COUNTED)
# The feeder's client id: the request faults let its requests through, so that they
# fall on the pipeline's (a dropped answer would stall the feeder, and the pipeline
# with it, and the next drop would fall on the feeder again).
FEEDER_CLIENT_ID = "txbroker-chaos-feeder"
# Request faults a chaos run draws from, by profile (each installed with a small count).
FAULT_PROFILES: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "default": [
        {"profile": "leader_moved"},
        {"profile": "coordinator_moved"},
        {"profile": "coordinator_loading"},
        {"api": "Produce", "drop": True},
        {"api": "Fetch", "close": True},
        {"api": "EndTxn", "drop": True},
        {"api": "TxnOffsetCommit", "error": "COORDINATOR_LOAD_IN_PROGRESS"},
        {"api": "*", "delay_ms": 300},
    ],
    # Answers lost on the way back (a network that drops them): the client retries what
    # the broker already appended. Idempotence and transactions make that harmless.
    "lost_answers": [
        {"api": "Produce", "drop": True},
        {"api": "EndTxn", "drop": True},
    ],
}


@dataclass
class ChaosReport:
    check: Report | None
    stall: str | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    records: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # the run could not check everything

    @property
    def ok(self) -> bool:
        return (self.stall is None and not self.errors and self.check is not None
                and self.check.ok)

    def text(self) -> str:
        lines = ["txbroker chaos: " + ("OK" if self.ok else "FAILED")]
        lines.append("faults: " + ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        if self.seconds:
            lines.append(f"throughput: {self.records} records in {self.seconds:.1f}s "
                         f"({self.records / self.seconds:.0f}/s, quiescence included)")
        if self.stall:
            lines.append(f"STALL: {self.stall}")
        lines += [f"ERROR: {error}" for error in self.errors]
        if self.check is not None:
            lines.append(self.check.text())
        lines.append("timeline:")
        lines += [f"  {t:7.2f}s {event}" for t, event in self.timeline]
        return "\n".join(lines)


def run(command: Sequence[str], *, input: str, output: str, instances: int = 2,
        duration: float = 60, records: int = 2000, partitions: int = 2,
        aborted_records: int = 20, group: str = "chaos-pipeline", interval: float = 2.0,
        broker_crashes: bool = True, power_loss: bool = True, faults: str = "default",
        stall_timeout: float = 60, seed: int | None = None, data_dir: str | None = None,
        check_order: bool = True, generator: Sequence[str] | str | None = None,
        mapping: str | IdOf | Mapping = "key", log=print,
        instance_kills: bool = True, clean_restarts: bool = True, hangs: bool = True,
        zombies: bool = True) -> ChaosReport:
    """Run ``command`` as ``instances`` pipeline instances under fire; a ChaosReport.
    ``generator``: a command that feeds ``input`` instead of the built-in feeder (then
    ``records`` and ``aborted_records`` are only hints); ``mapping``: ``key``,
    ``header:NAME``, ``python:module:function`` or a callable (mapping.py)."""
    if faults not in FAULT_PROFILES:
        raise ValueError(f"unknown fault profile {faults!r} ({', '.join(FAULT_PROFILES)})")
    mapper = parse_mapping(mapping)
    rng = random.Random(seed)
    strikes = events.strikes(instance_kills=instance_kills, broker_crashes=broker_crashes,
                             power_loss=power_loss, faults=bool(FAULT_PROFILES[faults]),
                             clean_restarts=clean_restarts, hangs=hangs, zombies=zombies)
    work = Path(data_dir or tempfile.mkdtemp(prefix="txbroker-chaos-"))
    broker = BrokerProcess(str(work / "broker"), {"admin.http.port": "0",
                                                  "group.initial.rebalance.delay.ms": "0"})
    broker.start()
    started = time.monotonic()
    report = ChaosReport(None)
    feeder: Feeder | Generator | None = None

    event = timeline(report, started, log)
    pipeline = Instances(command, instances, {
        "TXBROKER_BOOTSTRAP": broker.bootstrap, "TXBROKER_INPUT": input,
        "TXBROKER_OUTPUT": output, "TXBROKER_GROUP": group}, work)
    try:
        _create_topics(broker.bootstrap, (input, output), partitions)
        if generator is None:
            aborted = _feed_aborted(broker.bootstrap, input, aborted_records)
            feeder = Feeder(broker.bootstrap, input, records, duration * 0.8)
            log(f"feeding {records} records to {input} over {duration * 0.8:.0f}s (and "
                f"{len(aborted)} in aborted transactions)")
        else:
            feeder = Generator(generator, {**pipeline.env, "TXBROKER_RECORDS": str(records),
                                           "TXBROKER_SECONDS": f"{duration * 0.8:g}"}, work)
            log(f"generator feeding {input}: {' '.join(feeder.command)}")
        feeder.start()
        log(f"{instances} instance(s) of: {' '.join(command)}; mapping {mapper.name}")
        pipeline.start_all()
        under_fire(rng, broker, pipeline, event, strikes, FAULT_PROFILES[faults],
                   started + duration, interval)
        calm(broker, event)
        fed = None
        if generator is None:
            feeder.join()
        else:
            fed = feeder.finish(lambda: sum(_end_offsets(broker.bootstrap, input).values()),
                                stall_timeout)
        kind = "feeder restart" if generator is None else "generator restart"
        for failure in feeder.restarts:
            event(f"{kind}: {failure}")
        written = inputs_of(read_log(broker.bootstrap, input, id_of=mapper.input_id))
        report.errors += _ambiguous(written.repeated, mapper)
        stalls = (fed, _quiesce(broker, pipeline, group, input, stall_timeout, event,
                                written.ends))
        report.stall = "; ".join(s for s in stalls if s) or None
        pipeline.stop()
        offsets = _group_offsets(broker.bootstrap, group, input)
        reads = _read_committed(broker.bootstrap, output, mapper.output_id)
        report.check = check(written.records, read_log(broker.bootstrap, output,
                                                       id_of=mapper.output_id),
                             reads, group_offsets=offsets, aborted_inputs=written.aborted,
                             check_order=check_order)
        if generator is None:  # the broker lost an input the feeder was told it has
            keys = ({r.id for r in written.records} if mapper.input_id is key_id
                    else {r.id for r in read_log(broker.bootstrap, input)})
            for rid in sorted(feeder.acknowledged - keys):
                report.check.add("lost-write", {"id": rid, "input": "acknowledged to the "
                                                "feeder, not in the input log"})
        report.records = len(written.records)
        report.seconds = time.monotonic() - started
        return report
    finally:
        pipeline.stop()
        if isinstance(feeder, Generator):
            feeder.stop()
        if broker.running:
            broker.terminate()
        (work / "broker.log").write_text(broker.log_text())


def timeline(report: ChaosReport, started: float, log) -> Callable[[str], None]:
    """The run's ``event(text)``: into the report's timeline (its kind, the text before
    ":", counted) and the log."""

    def event(text: str) -> None:
        report.timeline.append((time.monotonic() - started, text))
        kind = text.split(":")[0]
        if kind in COUNTED:
            report.counts[kind] = report.counts.get(kind, 0) + 1
        log(f"[{time.monotonic() - started:7.2f}s] {text}")

    return event


def under_fire(rng: random.Random, broker: BrokerProcess, pipeline: Instances, event,
               strikes: list[str], profile: list[dict[str, Any]], deadline: float,
               interval: float, power_points: Sequence[str] = POWER_LOSS_POINTS) -> None:
    """Strike every ``interval`` seconds on average until ``deadline`` (monotonic),
    restarting what died meanwhile."""
    while time.monotonic() < deadline:
        pause = min(rng.expovariate(1 / interval), max(deadline - time.monotonic(), 0))
        events.sleep(pause, pipeline, event)
        supervise(broker, pipeline, event)
        if time.monotonic() >= deadline or not strikes:
            continue
        _strike(rng, broker, pipeline, event, strikes, profile, power_points)


def supervise(broker: BrokerProcess, pipeline: Instances, event) -> None:
    """Restart what died: the broker (a power-loss point fired) and instances that
    exited by themselves."""
    if not broker.running:
        code = broker.wait(30)
        broker.start()
        event(f"broker restart: it had exited with {code}")
    for instance, code in pipeline.restart_exited():
        event(f"instance exit: instance {instance} exited with {code}, restarted")
    events.tend(pipeline, event)


def _strike(rng: random.Random, broker: BrokerProcess, pipeline: Instances, event,
            strikes: list[str], profile: list[dict[str, Any]],
            power_points: Sequence[str]) -> None:
    what = rng.choice(strikes)
    if what == "restart":
        events.clean_restart(broker, event)
    elif what == "hang":
        events.hang(rng, broker, event)
    elif what == "zombie":
        events.pause(rng, pipeline, event)
    elif what == "kill":
        instance = rng.randrange(pipeline.count)
        pipeline.kill(instance)
        event(f"instance kill: SIGKILL instance {instance}, restarted")
    elif what == "crash":
        broker.kill()
        broker.start()
        event("broker crash: SIGKILL, restarted")
    elif what == "power":
        point = rng.choice(power_points)
        pending = _armed_points(broker)
        if pending:  # (not counted: only a point armed is a power loss to come)
            event(f"power loss pending: still armed at {', '.join(pending)}, not armed again")
        else:
            broker.faults.arm(point, "power_loss")
            event(f"power loss: armed at {point} (the next commit there)")
    else:
        spec = {**rng.choice(profile), "count": rng.randint(1, 3)}
        try:
            broker.faults.add({**spec, "except_client_id": FEEDER_CLIENT_ID})
            event(f"request fault: {spec}")
        except (RuntimeError, OSError) as e:  # the broker went down meanwhile
            event(f"request fault: not installed ({e})")


def _armed_points(broker: BrokerProcess) -> list[str]:
    """The fault points armed on the broker that have not fired yet."""
    try:
        return [f["point"] for f in broker.faults.list() if f.get("point") and f.get("active")]
    except (RuntimeError, OSError):  # the broker went down meanwhile
        return []


def calm(broker: BrokerProcess, event) -> None:
    if not broker.running:
        broker.wait(30)
        broker.start()
        event("broker restart: for quiescence")
    broker.faults.clear()
    event("faults off: waiting for quiescence")


def _ambiguous(repeated: dict[str, int], mapping: Mapping) -> list[str]:
    if not repeated:
        return []
    examples = ", ".join(f"{rid!r} x{n}" for rid, n in list(repeated.items())[:5])
    return [f"{len(repeated)} input id(s) belong to more than one input record under "
            f"mapping {mapping.name} (e.g. {examples}): which one an output came from is "
            f"unknown, and anomalies below that name them mean nothing. Give each input a "
            f"unique id (a restarted generator must not repeat "
            f"its keys), or use --mapping header:NAME"]


def _quiesce(broker: BrokerProcess, pipeline: Instances, group: str, topic: str,
             stall_timeout: float, event, ends: dict[tuple[str, int], int]) -> str | None:
    """Wait until the group has committed past every input (``ends``: per partition,
    one past its last input; a transaction marker after it need not be committed
    past); the stall's reason if it stops making progress for ``stall_timeout``
    seconds first."""
    last, last_change = None, time.monotonic()
    while True:
        supervise(broker, pipeline, event)
        committed = _group_offsets(broker.bootstrap, group, topic)
        # (A zombie still to come back could yet emit something: wait for it too.)
        if all(committed.get(tp, 0) >= end for tp, end in ends.items()) and not pipeline.zombies:
            event("quiescent: every input offset committed")
            return None
        progress = sum(committed.values())
        if progress != last:
            last, last_change = progress, time.monotonic()
        elif time.monotonic() - last_change > stall_timeout:
            behind = {f"{t}-{p}": f"{committed.get((t, p), 0)}/{end}"
                      for (t, p), end in ends.items()}
            return (f"no progress for {stall_timeout:.0f}s: group {group} committed "
                    f"{behind} of {topic}; instances alive "
                    f"{sum(p.poll() is None for p in pipeline.procs.values())}/{pipeline.count}"
                    f" (a classic group waits out session.timeout.ms of a killed member: "
                    f"use static membership, group.instance.id, or a short session timeout)")
        time.sleep(0.5)


# --- clients (confluent-kafka) ----------------------------------------------------------


def _confluent():
    try:
        import confluent_kafka
    except ImportError:
        raise RuntimeError("txbroker chaos needs confluent-kafka (pip install "
                           "confluent-kafka) for its feeder and reader") from None
    return confluent_kafka


def _create_topics(bootstrap: str, topics: Sequence[str], partitions: int) -> None:
    ck = _confluent()
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, partitions) for t in dict.fromkeys(topics) if t not in existing]
    for future in admin.create_topics(new).values() if new else ():
        try:
            future.result(30)
        except ck.KafkaException as e:
            if e.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _feed_aborted(bootstrap: str, topic: str, count: int) -> set[str]:
    """``count`` records keyed aborted-N, each in a transaction that aborts."""
    ck = _confluent()
    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "chaos-feeder"})
    txn.init_transactions(30)
    keys = set()
    for i in range(count):
        txn.begin_transaction()
        txn.produce(topic, key=f"aborted-{i}", value=b"x", partition=i % _partitions(txn, topic))
        txn.flush(30)
        txn.abort_transaction(30)
        keys.add(f"aborted-{i}")
    return keys


def _partitions(client, topic: str) -> int:
    return len(client.list_topics(topic, timeout=30).topics[topic].partitions)


class Feeder(threading.Thread):
    """Feeds ``count`` records keyed in-N over ``seconds``, through broker crashes (an
    idempotent producer retries until each is acknowledged). A fatal producer error
    (the faults reach the feeder too) starts a new producer that goes on with the next
    ids: the records in flight may or may not be in the log, and the input log, not
    this list, says what the input is. ``acknowledged``: ids the broker acknowledged
    (each must be in the input log)."""

    def __init__(self, bootstrap: str, topic: str, count: int, seconds: float) -> None:
        super().__init__(name="chaos-feeder", daemon=True)
        self.bootstrap, self.topic, self.count, self.seconds = bootstrap, topic, count, seconds
        self.acknowledged: set[str] = set()
        self.restarts: list[str] = []

    def _producer(self):
        return _confluent().Producer({
            "bootstrap.servers": self.bootstrap, "client.id": FEEDER_CLIENT_ID,
            "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 600_000, "metadata.recovery.strategy": "none",
            # A Produce answer dropped (a crash, a hang) is retried after 5 s, not 60.
            "socket.timeout.ms": 5000})

    def _placed(self, err, msg) -> None:
        if err is None:
            self.acknowledged.add(msg.key().decode())

    def run(self) -> None:
        ck = _confluent()
        producer = self._producer()
        started = time.monotonic()
        i = 0
        while i < self.count:
            try:
                due = started + self.seconds * i / self.count
                while time.monotonic() < due:
                    producer.poll(max(min(due - time.monotonic(), 0.05), 0))
                producer.produce(self.topic, key=f"in-{i}", value=b"%d" % i,
                                 on_delivery=self._placed)
                i += 1
                if i == self.count:
                    while producer.flush(1):
                        pass
            except ck.KafkaException as e:
                self.restarts.append(str(e.args[0]))
                producer = self._producer()


def _end_offsets(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    ck = _confluent()
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-checker"})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        return {(topic, p): consumer.get_watermark_offsets(ck.TopicPartition(topic, p),
                                                           timeout=30)[1]
                for p in meta.partitions}
    finally:
        consumer.close()


def _group_offsets(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], int]:
    ck = _confluent()
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        tps = [ck.TopicPartition(topic, p) for p in meta.partitions]
        return {(topic, tp.partition): max(tp.offset, 0)
                for tp in consumer.committed(tps, timeout=30)}
    finally:
        consumer.close()


def _read_committed(bootstrap: str, topic: str, id_of: IdOf = key_id) -> list[Read]:
    """The output as a read_committed consumer sees it, to its last stable offsets."""
    ck = _confluent()
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-checker",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        tps = [ck.TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(tps)
        ends = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)[1]
                for p in meta.partitions}
        reads: list[Read] = []
        deadline = time.monotonic() + 120
        while any(ends[tp.partition] > 0 and tp.offset < ends[tp.partition]
                  for tp in consumer.position(tps)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic}: not at its end after 120 s")
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    record = ChaosRecord(topic, msg.partition(), msg.offset(), msg.key(),
                                         msg.value(), tuple(msg.headers() or ()))
                    reads.append(Read(id_of(record), topic, msg.partition(), msg.offset(),
                                      at=time.monotonic()))
        return reads
    finally:
        consumer.close()
