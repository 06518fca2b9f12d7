"""Issue 30's numbers (docs/performance.md, "On a three-node Kafka cluster"): the payments
pipeline on txbroker and on the three-node cluster, and MirrorMaker 2's copy rate from
txbroker to the cluster. One run each, on this machine::

    nice -n 10 .venv/bin/python -m tests.cluster.numbers [--records 100000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from txbroker.spark_jobs.payments.pipeline import PipelineConfig, run_pipeline

from testing.broker_process import BrokerProcess
from tests.cluster import mirror_util as mu
from tests.cluster.cluster import KafkaCluster
from tests.cluster.mirror import MirrorMaker2
from tests.integration.txn_util import TXN_CONFIG


def pipeline(bootstrap: str, work: Path) -> float:
    """The pipeline of `make demo` (generator, transactional processor with a crash):
    orders per second over the whole run."""
    config = PipelineConfig()
    result = run_pipeline(bootstrap, work, config)
    return config.orders / result.elapsed


def mirror_rate(source: str, target: str, work: Path, records: int) -> tuple[float, float]:
    """Records/s MM2 copies (from the first copied record to the last), and seconds from
    MM2's start to the last."""
    topic = "mm2-rate"
    client = mu.admin(source)
    from confluent_kafka.admin import NewTopic

    client.create_topics([NewTopic(topic, 3, -1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": source, "linger.ms": 20})
    value = b"x" * 200
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=n % 3)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)
    started = time.monotonic()
    first = 0.0
    with MirrorMaker2(work / "mm2-rate", source, target, topics=topic, groups="none") as mm2:
        while True:
            mm2.check_alive()
            try:
                copied = sum(mu.end_offsets(target, topic, 3).values())
            except Exception:  # noqa: BLE001 (the topic does not exist yet)
                copied = 0
            now = time.monotonic()
            if copied and not first:
                first = now
            if copied >= records:
                break
            time.sleep(0.2)
    return records / max(now - first, 1e-3), now - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cluster-numbers-"))
    broker = BrokerProcess(str(work / "txbroker"), overrides=TXN_CONFIG)
    broker.start()
    cluster = KafkaCluster(work / "cluster")
    try:
        on_txbroker = pipeline(broker.bootstrap, work)
        print(f"pipeline on txbroker: {on_txbroker:.1f} orders/s", flush=True)
        cluster.start()
        on_cluster = pipeline(cluster.bootstrap, work)
        print(f"pipeline on the 3-node cluster: {on_cluster:.1f} orders/s "
              f"(ratio cluster/txbroker {on_cluster / on_txbroker:.2f})", flush=True)
        rate, total = mirror_rate(broker.bootstrap, cluster.bootstrap, work, args.records)
        print(f"MirrorMaker 2: {args.records} records of 200 B copied at {rate:.0f} "
              f"records/s ({total:.1f} s from MM2's start)", flush=True)
    finally:
        cluster.stop()
        broker.kill()


if __name__ == "__main__":
    main()
