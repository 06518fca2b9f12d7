"""A share-group worker (KIP-932) with confluent-kafka's ShareConsumer (2.16), for
``txbroker chaos --share``::

    txbroker chaos --share --input jobs --instances 3 --duration 60 -- \\
        python -m txbroker.testing.chaos.recipes.confluent_share_worker

Each worker of the pool takes records of TXBROKER_INPUT from share group
TXBROKER_GROUP, does its work, then ACCEPTs them (explicit acknowledgement mode) and
waits for the broker's answer (``commit_sync``). A record ACCEPTed is done for the
group; one the worker never acknowledges (it was killed, the broker crashed) comes back,
to this worker or another, with a higher delivery count: the work must be idempotent.

It writes what happened into TXBROKER_HISTORY (a folder: one file per process) for the
chaos checker (testing/chaos/share_checker.py): each delivery with its delivery count,
each ACCEPT sent, and the answer per partition: confirmed, failed (the broker's error:
not applied), or unknown (commit_sync failed, librdkafka's own error such as a
transport failure, or a request timeout: the broker may have applied it before its
answer was lost). Your own worker can write the same lines (``History``).
Crash-only: an unexpected error ends the process, the supervisor starts it again.
Broken on purpose: ``--reject-every N`` REJECTs every Nth record (lost: the checker
says so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

COMMIT_TIMEOUT_S = 10.0


class History:
    """JSON lines, one ``os.write`` each on an O_APPEND file: a SIGKILL never leaves
    half a line behind but the one being written (the checker skips a torn last
    line)."""

    def __init__(self, folder: str, instance: str) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        self.worker = f"{instance}-{os.getpid()}"
        path = Path(folder) / f"worker-{self.worker}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._seq = 0

    def _write(self, line: dict) -> None:
        os.write(self._fd, (json.dumps({**line, "w": self.worker, "ts": time.time()}) +
                            "\n").encode())

    def delivered(self, topic: str, partition: int, offset: int, key: str | None,
                  count: int | None) -> int:
        """A record polled; its sequence number in this worker."""
        self._seq += 1
        self._write({"d": [topic, partition, offset, key, count], "s": self._seq})
        return self._seq

    def sent(self, seqs: list[int]) -> None:
        """ACCEPTs on their way (before commit_sync: a kill now leaves them unknown)."""
        self._write({"sent": seqs})

    def answered(self, seqs: list[int], error: str | None) -> None:
        """The broker's answer to those ACCEPTs (None: confirmed)."""
        self._write({"done": seqs, "error": error})

    def unknown(self, seqs: list[int], why: str) -> None:
        self._write({"unknown": seqs, "error": why})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reject-every", type=int, default=0, metavar="N",
                        help="broken on purpose: REJECT every Nth record polled (the "
                             "checker reports them lost)")
    parser.add_argument("--work-ms", type=float, default=20,
                        help="how long the work on one record takes (default: 20 ms): "
                             "a worker killed at work holds records that come back")
    args = parser.parse_args(argv)
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    env = os.environ
    topic, group = env.get("TXBROKER_INPUT", "jobs"), env.get("TXBROKER_GROUP", "chaos-workers")
    history = History(env.get("TXBROKER_HISTORY", "share-history"),
                      env.get("TXBROKER_INSTANCE", "0"))
    consumer = ShareConsumer({
        "bootstrap.servers": env["TXBROKER_BOOTSTRAP"], "group.id": group,
        "share.acknowledgement.mode": "explicit",
        # A lost answer (a broker crash or hang, a dropped response) is given up on
        # after 5 s, not librdkafka's 60; the connection is made again.
        "socket.timeout.ms": 5000,
        # Reconnect to the restarted broker instead of re-bootstrapping.
        "metadata.recovery.strategy": "none"})
    consumer.subscribe([topic])
    polled_count = 0
    while True:
        polled = [m for m in consumer.poll(0.5) if m.error() is None]
        if not polled:
            continue
        seqs: dict[tuple[str, int], list[int]] = {}
        accepted = []
        for m in polled:
            key = None if m.key() is None else m.key().decode(errors="replace")
            seq = history.delivered(m.topic(), m.partition(), m.offset(), key,
                                    m.delivery_count())
            polled_count += 1
            if args.reject_every and polled_count % args.reject_every == 0:
                consumer.acknowledge(m, AcknowledgeType.REJECT)  # never delivered again
                continue
            time.sleep(args.work_ms / 1000)  # the work, done before the ACCEPT
            accepted.append(m)
            seqs.setdefault((m.topic(), m.partition()), []).append(seq)
        if not seqs:
            continue  # (only REJECTs: sent with the next poll)
        # Written before the first acknowledge(): librdkafka may send an ACCEPT with any
        # later request, so from here a kill leaves these unknown, never hidden.
        history.sent([s for group_seqs in seqs.values() for s in group_seqs])
        for m in accepted:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        try:
            results = consumer.commit_sync(COMMIT_TIMEOUT_S)
        except KafkaException as e:
            history.unknown([s for group_seqs in seqs.values() for s in group_seqs], str(e))
            continue
        answers = {(tp.topic, tp.partition): error for tp, error in results.items()}
        for tp, tp_seqs in seqs.items():
            if tp not in answers:  # no answer for that partition: it may have been applied
                history.unknown(tp_seqs, "no result for the partition")
            elif answers[tp] is None:
                history.answered(tp_seqs, None)
            elif _local(answers[tp]):  # the answer was lost (a crash, a drop): maybe applied
                history.unknown(tp_seqs, str(answers[tp]))
            else:  # the broker's error: not applied, the record comes back
                history.answered(tp_seqs, str(answers[tp]))


# Codes librdkafka reports for an answer that never came (its ShareAcknowledge timed
# out: "Broker: Request timed out"), besides its own negative ones.
UNANSWERED = (7, 13)  # REQUEST_TIMED_OUT, NETWORK_EXCEPTION


def _local(error: Exception) -> bool:
    """librdkafka's own errors (negative codes: transport failure, timed out) and
    timeouts say nothing of what the broker did."""
    kafka_error = error.args[0] if error.args else None
    return not hasattr(kafka_error, "code") or kafka_error.code() < 0 or \
        kafka_error.code() in UNANSWERED


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
