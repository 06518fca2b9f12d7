"""An exactly-once consume-transform-produce pipeline with aiokafka (0.14), for
``txbroker chaos``::

    txbroker chaos --input orders --output payments --instances 2 --duration 60 -- \\
        python -m txbroker.testing.chaos.recipes.aiokafka_pipeline

Each input record goes to the same partition of the output with the same key, its
offsets committed in the same transaction (``send_offsets_to_transaction``; aiokafka
sends the group id only, TxnOffsetCommit v0, and its OffsetFetch is v3 at most, without
KIP-447's ``require_stable``). That last part matters: a rebalance runs in the
background while a transaction is in flight, and the consumer then fetches its
committed offsets *before* that transaction's offsets are committed, rewinds to the
older ones and processes the same records again (a duplicate, seen in ``txbroker
chaos``). The rebalance listener below closes that window: a rebalance waits for the
transaction in flight; the offsets come from the records (``position()`` inside the
transaction would wait for the rebalance, then report the older offset); and records
polled before a rebalance are not produced (the instance exits and starts again from
the committed offsets).

Crash-only: any error ends the process, the supervisor restarts it from the group's
committed offsets. The settings a crash test needs are commented where they are set.
"""

from __future__ import annotations

import asyncio
import os
import sys

BATCH = 100


async def pipeline() -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener

    env = os.environ
    bootstrap, instance = env["TXBROKER_BOOTSTRAP"], env.get("TXBROKER_INSTANCE", "0")
    source, sink = env.get("TXBROKER_INPUT", "orders"), env.get("TXBROKER_OUTPUT", "payments")
    group = env.get("TXBROKER_GROUP", "chaos-pipeline")
    in_flight = asyncio.Lock()  # held by a transaction
    rebalances = [0]

    class WaitForTransaction(ConsumerRebalanceListener):
        """Revocation comes before JoinGroup, so before the committed offsets are
        fetched again: it waits until the transaction in flight has committed them."""

        async def on_partitions_revoked(self, revoked) -> None:
            if revoked:  # the first join revokes nothing
                rebalances[0] += 1
            async with in_flight:
                pass

        async def on_partitions_assigned(self, assigned) -> None:
            pass

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group,
        # Static membership and a short session: a SIGKILLed member is replaced at once
        # by its restart, not after the session timeout.
        group_instance_id=f"{group}-{instance}", session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        isolation_level="read_committed", enable_auto_commit=False,
        auto_offset_reset="earliest")
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        # Stable across restarts: the restarted instance fences its previous incarnation
        # and aborts the transaction it left open.
        transactional_id=f"{group}-{instance}", transaction_timeout_ms=10000,
        # A lost answer (a broker crash, a dropped response) is retried after this.
        request_timeout_ms=5000)
    await producer.start()  # InitProducerId: fences the previous incarnation
    await consumer.start()
    consumer.subscribe([source], listener=WaitForTransaction())
    try:
        while True:
            polled = rebalances[0]
            batches = await consumer.getmany(timeout_ms=500, max_records=BATCH)
            async with in_flight:
                if batches and rebalances[0] != polled:
                    # Polled under the assignment a rebalance just revoked: whether the
                    # consumer fetches them again is not ours to know. Crash-only: exit,
                    # the restart starts from the committed offsets.
                    print("a rebalance revoked what was polled: exiting", file=sys.stderr)
                    return
                if batches:
                    await _transaction(producer, batches, sink, group)
    finally:
        await consumer.stop()
        await producer.stop()


async def _transaction(producer, batches, sink: str, group: str) -> None:
    """The polled records to ``sink`` and their offsets, in one transaction."""
    async with producer.transaction():  # aborts on an exception, then re-raises
        sent = [await producer.send(sink, key=r.key, value=r.value, partition=tp.partition)
                for tp, records in batches.items() for r in records]
        await asyncio.gather(*sent)
        # From the records, not consumer.position(): that waits for a rebalance that
        # waits for this transaction.
        offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
        await producer.send_offsets_to_transaction(offsets, group)


if __name__ == "__main__":
    try:
        asyncio.run(pipeline())
    except KeyboardInterrupt:
        sys.exit(0)
