"""The INFO lines an operator follows (docs/operations.md, "Logs"), from real clients
against the in-process broker."""

import logging
import re
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer


@pytest.fixture
def txbroker_config():
    return {
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
        "transactional.id.expiration.ms": "1500",
    }


@pytest.fixture(autouse=True)
def info_logs(caplog):
    caplog.set_level(logging.INFO, logger="txbroker")
    return caplog


def txn_producer(txbroker, tid, **extra):
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": tid,
                  "metadata.recovery.strategy": "none", **extra})
    p.init_transactions(10)
    return p


def wait_for_log(caplog, pattern, timeout=10.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        for record in list(caplog.records):
            message = record.getMessage()
            if record.levelno == logging.INFO and re.search(pattern, message):
                return message
        if time.monotonic() > deadline:
            raise AssertionError(f"no INFO line matching {pattern!r}; got:\n" + "\n".join(
                r.getMessage() for r in caplog.records))
        time.sleep(0.05)


def test_a_new_data_directory_is_not_an_unclean_shutdown(txbroker, caplog):
    # The fixture started on a fresh directory; a restart follows a clean shutdown.
    started = "\n".join(r.getMessage() for r in caplog.get_records("setup"))
    assert "(new data directory)" in started
    assert "unclean" not in started
    txbroker.restart()
    wait_for_log(caplog, r"\(clean shutdown\)")


def test_timeout_abort_names_the_transaction(txbroker, caplog):
    txbroker.create_topic("lt", 1)
    p = txn_producer(txbroker, "log-timeout", **{"transaction.timeout.ms": "1000"})
    p.begin_transaction()
    p.produce("lt", value=b"x", partition=0)
    p.flush(10)
    line = wait_for_log(caplog, r"aborting the transaction of transactional.id 'log-timeout'")
    assert re.search(r"\(producer id \d+, epoch 0\): open for \d+\.\ds, past its transaction "
                     r"timeout; epoch bumped to 1", line), line


def test_fencing_is_logged_for_the_successor_and_the_zombie(txbroker, caplog):
    txbroker.create_topic("lf", 1)
    zombie = txn_producer(txbroker, "log-fence")
    zombie.begin_transaction()
    zombie.produce("lf", value=b"z", partition=0)
    zombie.flush(10)
    txn_producer(txbroker, "log-fence")
    line = wait_for_log(caplog, r"producer fenced: InitProducerId for transactional.id "
                                r"'log-fence'")
    assert "from epoch 0 to 1; its ongoing transaction" in line, line
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    line = wait_for_log(caplog, r"producer fenced: a request of transactional.id 'log-fence'")
    assert "epoch 0 (current epoch 2) was answered PRODUCER_FENCED" in line, line


def test_transactional_id_expiry(txbroker, caplog):
    txbroker.create_topic("le", 1)
    p = txn_producer(txbroker, "log-expire")
    p.begin_transaction()
    p.produce("le", value=b"x", partition=0)
    p.commit_transaction(10)
    line = wait_for_log(caplog, r"transactional.id 'log-expire' expired after", timeout=15)
    assert "(transactional.id.expiration.ms); producer id" in line, line


def test_recovery_completes_a_decided_transaction(txbroker, caplog):
    txbroker.create_topic("lr", 2)
    p = txn_producer(txbroker, "log-recover")
    p.begin_transaction()
    p.produce("lr", value=b"a", partition=0)
    p.produce("lr", value=b"b", partition=1)
    p.flush(10)
    txbroker.faults.arm("before_markers", "crash")
    # The commit's answer may be lost with the crash: run it aside, bounded.
    committer = threading.Thread(target=lambda: _ignore(p.commit_transaction, 20), daemon=True)
    committer.start()
    txbroker.wait_crashed()
    txbroker.restart()
    line = wait_for_log(caplog, r"recovery: completing the commit of transactional.id "
                                r"'log-recover'")
    assert "writing 2 COMMIT marker(s)" in line, line
    line = wait_for_log(caplog, r"recovery: transaction of transactional.id 'log-recover'")
    assert "completed (committed), 2 marker(s) written" in line, line
    committer.join(25)


def _ignore(fn, *args):
    try:
        fn(*args)
    except KafkaException:
        pass


def test_rebalance_names_generation_and_members(txbroker, caplog):
    txbroker.create_topic("lg", 1)
    c = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "log-group",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["lg"])
    deadline = time.monotonic() + 15
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.1)
    line = wait_for_log(caplog, r"group 'log-group' rebalanced")
    assert "generation 1 with 1 member(s), protocol" in line, line
    assert "preparing to rebalance group 'log-group' in state Empty" in caplog.text
    c.close()
    wait_for_log(caplog, r"group 'log-group' is now Empty")
