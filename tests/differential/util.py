"""Helpers of the differential tests that both brokers need the same way."""

from __future__ import annotations

import time

from tests.integration.txn_util import RawTxn

# What a client retries InitProducerId on: COORDINATOR_LOAD_IN_PROGRESS (Kafka, while it
# loads a __transaction_state partition it just created), COORDINATOR_NOT_AVAILABLE,
# NOT_COORDINATOR, CONCURRENT_TRANSACTIONS.
RETRIABLE_INIT = {14, 15, 16, 51}


def init_txn(txn: RawTxn, timeout: float = 30, **kwargs):
    """InitProducerId retried as a client would; the last response."""
    deadline = time.monotonic() + timeout
    while True:
        r = txn.init(expect_ok=False, **kwargs)
        if int(r.error_code) not in RETRIABLE_INIT or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def describe_group(broker, group: str) -> tuple:
    """DescribeGroups v5 of one group over the wire: (error, state, protocol type,
    member count). ``broker``: anything with ``host`` and ``port``."""
    from txbroker.protocol.messages import build, request_module

    from tests.helpers import RawClient

    m = request_module(15, 5)
    client = RawClient(broker.host, broker.port)
    try:
        r = client.request(15, 5, build(m.DescribeGroupsRequest, groups=(group,),
                                        include_authorized_operations=False))
    finally:
        client.close()
    (g,) = r.groups
    return int(g.error_code), g.group_state, g.protocol_type, len(g.members)


def wait_txn_state(broker, transactional_id: str, state: str = "CompleteCommit",
                   timeout: float = 15) -> None:
    """Wait until the coordinator says (DescribeTransactions v0, on the wire) the id's
    transaction is in ``state``. The partitions' markers (wait_stable) come before the
    coordinator's CompleteCommit record: in between, Kafka answers AddPartitionsToTxn and
    EndTxn with CONCURRENT_TRANSACTIONS and a produce's verification with
    NOT_ENOUGH_REPLICAS, a window a loaded machine widens."""
    from txbroker.protocol.messages import build, request_module

    m = request_module(65, 0)
    client = broker.raw()
    try:
        deadline = time.monotonic() + timeout
        while True:
            r = client.request(65, 0, build(m.DescribeTransactionsRequest,
                                            transactional_ids=(transactional_id,)))
            (t,) = r.transaction_states
            if int(t.error_code) == 0 and t.transaction_state == state:
                return
            assert time.monotonic() < deadline, (int(t.error_code), t.transaction_state)
            time.sleep(0.05)
    finally:
        client.close()
