"""A long soak of the broker process under mixed load: leaks and drift, not speed.

    make soak                                            # 30 minutes (SOAK_MINUTES=...)
    .venv/bin/python -m bench.soak --minutes 30 --out bench/results/soak
    .venv/bin/python -m bench.soak --minutes 3 --sample-seconds 20   # a quick look

The broker runs as a process (``python -m txbroker serve``, admin endpoint on); the load
runs in threads of this process with the real clients (load.py), at rates meant to keep
the broker at about half a core (``--load`` scales the producers' rates):

* three transactional producers (confluent-kafka): 40 transactions/s each of 10
  records, one in four aborted, a new producer instance (fencing the last) every 2 minutes;
* an idempotent producer (acks=all): 3,000 records/s, a new instance every 3 minutes;
* two read_committed consumers (confluent-kafka and kafka-python) of the transactional
  topic: an aborted record seen is a violation;
* a classic group and a KIP-848 group (``group.protocol=consumer``) of 3 confluent-kafka
  consumers on the idempotent topic: every 10 s a member joins or the oldest leaves;
* every 10 s a topic created, written, the groups listed and described, the topic deleted;
* the console polled over HTTP, a page a second;
* share groups: a marked place, for when the broker has them.

Each ``--sample-seconds`` (60) it samples the broker process: RSS (/proc/PID/status),
open file descriptors (/proc/PID/fd), asyncio tasks and connections (its /metrics:
``txbroker_event_loop_tasks``, ``txbroker_connections``), CPU, log lines and bytes,
ERROR and WARNING lines, and the load's records produced and consumed and
transactions. Files under ``--out``: soak.json and soak.csv (the samples), soak.md (the
verdicts: verdict.py), soak.png (png.py), broker.log. Exit status 1 when a goal fails.
"""
