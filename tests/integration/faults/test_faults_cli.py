"""``txbroker faults add|list|remove`` and the admin endpoint's /faults against a broker
process, with its bearer token (docs/fault-injection.md, docs/tools.md)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from txbroker.broker.fault_spec import load_fault_specs
from txbroker.testing import BrokerProcess

from txbroker.cli import main


def _cli(capsys, *args: str, token_file: str | None, url: str) -> tuple[int, str, str]:
    """The command's exit code, stdout and stderr (run in this process: `txbroker` is
    cli.main)."""
    argv = ["faults", *args, "--admin-url", url]
    if token_file:
        argv += ["--token-file", token_file]
    capsys.readouterr()
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def secured_process(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    proc = BrokerProcess(str(tmp_path / "data"), {"admin.http.port": "0",
                                                  "admin.http.auth.token.file": str(token)})
    proc.start()
    try:
        yield proc, str(token)
    finally:
        proc.kill()


def test_cli_adds_lists_and_removes_faults_of_a_broker_process(secured_process, capsys):
    proc, token = secured_process
    url = proc.admin_url
    rc, _out, err = _cli(capsys, "list", token_file=None, url=url)
    assert rc == 1 and "HTTP 401" in err
    rc, out, err = _cli(capsys, "add", "--api", "Produce", "--topic", "cli", "--partition", "0",
                 "--error", "NOT_LEADER_OR_FOLLOWER", "--count", "2",
                 token_file=token, url=url)
    assert rc == 0, err
    fault_id = out.splitlines()[1].split()[0]
    rc, _out, err = _cli(capsys, "add", "--api", "Produce", "--error", "NO_SUCH_ERROR",
                         token_file=token, url=url)
    assert rc == 1 and "unknown Kafka error 'NO_SUCH_ERROR'" in err

    reports = []
    producer = Producer({"bootstrap.servers": proc.bootstrap, "retry.backoff.ms": 20,
                         "topic.metadata.refresh.fast.interval.ms": 50})
    for i in range(3):
        producer.produce("cli", value=b"%d" % i, on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(30) == 0
    assert reports == [None] * 3

    rc, out, _err = _cli(capsys, "list", "--output", "json", token_file=token, url=url)
    (fault,) = json.loads(out)
    assert (fault["id"], fault["fired"], fault["active"]) == (fault_id, 2, False)
    rc, out, _err = _cli(capsys, "remove", "--all", token_file=token, url=url)
    assert rc == 0 and "removed 0 fault(s)" in out


def test_the_broker_process_fixture_takes_faults(broker_process):
    fault = broker_process.faults.add(api="ApiVersions", close=True, count=2)
    producer = Producer({"bootstrap.servers": broker_process.bootstrap})
    assert "__consumer_offsets" not in producer.list_topics(timeout=30).topics
    assert fault.fired == 2 and not fault.active
    assert broker_process.faults.list()[0]["fired"] == 2


def test_broker_process_faults_through_the_admin_endpoint(secured_process):
    proc, _token = secured_process
    fault = proc.faults.add(api="ApiVersions", delay_ms=1, count=1)
    producer = Producer({"bootstrap.servers": proc.bootstrap})
    producer.list_topics(timeout=10)
    assert fault.fired == 1 and not fault.active
    with pytest.raises(ValueError, match="in-process faults only"):
        proc.faults.add(api="Produce", callable="print")
    request = urllib.request.Request(proc.admin_url + "/faults", method="GET")
    with pytest.raises(urllib.error.HTTPError) as no_token:
        urllib.request.urlopen(request, timeout=10)
    assert no_token.value.code == 401


def test_a_hang_from_the_configuration_ended_from_the_command_line(tmp_path, capsys):
    """A broker process that starts hung (``txbroker.faults``): a client's first
    request waits until ``txbroker faults remove`` ends the hang; ``faults add --hang``
    installs another."""
    proc = BrokerProcess(str(tmp_path / "data"), {
        "admin.http.port": "0", "txbroker.faults": json.dumps({"broker": "hang", "ms": 600_000})})
    proc.start()
    try:
        found: list = []
        client = threading.Thread(target=lambda: found.append(
            Producer({"bootstrap.servers": proc.bootstrap}).list_topics(timeout=60)))
        client.start()
        deadline = time.monotonic() + 30
        while proc.faults.list()[0]["fired"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        (hang,) = proc.faults.list()
        assert (hang["broker"], hang["active"], found) == ("hang", True, [])
        assert hang["fired"] >= 1  # the client's ApiVersions, held
        rc, out, err = _cli(capsys, "remove", hang["id"], token_file=None, url=proc.admin_url)
        assert rc == 0, err
        client.join(60)
        assert found and "__consumer_offsets" not in found[0].topics
        rc, out, err = _cli(capsys, "add", "--hang", "300", token_file=None, url=proc.admin_url)
        assert rc == 0 and "broker=hang ms=300" in out, err
    finally:
        proc.kill()


def test_power_loss_on_demand_from_the_command_line(tmp_path, capsys):
    """``txbroker faults add --power-loss``: the process exits as after SIGKILL (137),
    what it acknowledged with acks=all is there after the restart. The configuration
    refuses a crash (it would crash every start)."""
    proc = BrokerProcess(str(tmp_path / "data"), {"admin.http.port": "0"})
    proc.start()
    try:
        producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all"})
        for i in range(5):
            producer.produce("kept", b"%d" % i)
        assert producer.flush(30) == 0
        rc, out, err = _cli(capsys, "add", "--power-loss", token_file=None, url=proc.admin_url)
        assert rc == 0 and "broker=power_loss" in out, err
        assert proc.wait(30) == 137
        assert "crashing at fault f1 (power loss)" in proc.log_text()
        proc.start()
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "r"})
        low, high = consumer.get_watermark_offsets(TopicPartition("kept", 0), timeout=30)
        consumer.close()
        assert (low, high) == (0, 5)
    finally:
        proc.kill()
    with pytest.raises(ValueError, match="on demand only"):
        load_fault_specs(json.dumps([{"broker": "crash"}]))
