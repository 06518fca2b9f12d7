"""Options of the txbroker Spark source: parsing and errors, offset JSON, the
maxOffsetsPerTrigger split, minPartitions, and the reader's data-loss handling."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from txbroker.protocol.records import Record, build_batch
from txbroker.spark_jobs.options import (
    Range,
    Subscription,
    offsets_from_json,
    offsets_json,
    parse_offsets_json,
    parse_options,
    rate_limit,
    resolve_offsets,
    select_partitions,
    split_ranges,
)
from txbroker.spark_jobs.reader import read_range
from txbroker.spark_jobs.source import user_message
from txbroker.spark_jobs.wire import FetchResult, TxBrokerSourceError, parse_bootstrap

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "orders"}


def parse(streaming=True, **extra):
    return parse_options({**BASE, **extra}, streaming=streaming)


def error_of(streaming=True, base=None, **options) -> str:
    opts = dict(BASE if base is None else base)
    opts.update(options)
    with pytest.raises(TxBrokerSourceError) as info:
        parse_options(opts, streaming=streaming)
    return str(info.value)


def test_defaults_match_sparks_kafka_source():
    stream = parse(streaming=True)
    assert stream.starting == "latest"
    assert stream.fail_on_data_loss is True and stream.include_headers is False
    assert stream.max_offsets_per_trigger is None
    assert parse(streaming=False).starting == "earliest"
    assert parse(streaming=False).ending == "latest"


def test_option_names_are_case_insensitive():
    opts = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubScribe": "a, b ,a",
                          "startingoffsets": "EARLIEST", "MAXOFFSETSPERTRIGGER": "10",
                          "failondataloss": "False", "includeheaders": "TRUE"}, streaming=True)
    assert opts.subscription == Subscription("subscribe", topics=("a", "b"))
    assert opts.starting == "earliest"
    assert opts.max_offsets_per_trigger == 10
    assert opts.fail_on_data_loss is False and opts.include_headers is True


def test_subscriptions():
    assert parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ord.*"},
                         streaming=True).subscription.pattern == "ord.*"
    sub = parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'},
                        streaming=True).subscription
    assert sub.assigned == (("a", 2), ("b", 0), ("b", 1))


@pytest.mark.parametrize(("options", "needle"), [
    ({"subscribe": None}, "exactly one of the options subscribe, subscribePattern, assign"),
    ({"assign": '{"t":[0]}'}, "got subscribe, assign"),
    ({"subscribe": " , "}, "subscribe must name at least one topic"),
    ({"subscribe": None, "subscribePattern": "("}, "not a valid regex"),
    ({"subscribe": None, "assign": "[0]"}, 'assign must be JSON like {"topic":[0,1]}'),
    ({"subscribe": None, "assign": "{"}, 'assign must be JSON like {"topic":[0,1]}'),
    ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": "localhost"}, "'localhost' is not host:port"),
    ({"kafka.isolation.level": "read_uncommitted"}, "reads read_committed only"),
    ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol=TLS in the txbroker "
                                         "source's options is not one of PLAINTEXT, SSL"),
    ({"kafka.security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism=GSSAPI (Kafka's default)"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"},
     "PLAIN needs kafka.sasl.jaas.config"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/nonexistent"},
     "cannot read kafka.ssl.truststore.location"),
    ({"kafka.sasl.username": "x"}, "Kafka client option kafka.sasl.username is not supported"),
    ({"subscibe": "x"}, "unknown option 'subscibe' for the txbroker source (did you mean "
                        "subscribe?)"),
    ({"path": "/x"}, "unknown option 'path'"),
    ({"kafka.fetch.min.bytes": "1"}, "Kafka client option kafka.fetch.min.bytes is not "
                                     "supported"),
    ({"startingTimestamp": "1"}, "startingTimestamp of Spark's Kafka source is not supported"),
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer, got '0'"),
    ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger must be a positive integer"),
    ({"minPartitions": "-1"}, "minPartitions must be a positive integer"),
    ({"failOnDataLoss": "yes"}, "failOnDataLoss must be true or false, got 'yes'"),
    ({"includeHeaders": "1"}, "includeHeaders must be true or false"),
    ({"startingOffsets": "first"}, "startingOffsets is neither earliest/latest nor JSON"),
    ({"startingOffsets": '{"orders":{"x":1}}'}, "partition 'x' of topic 'orders' is not a "
                                                "number"),
    ({"startingOffsets": '{"orders":{"0":-3}}'}, "offset -3 of orders-0 must be"),
    ({"startingOffsets": '{"orders":{"0":1.5}}'}, "offset 1.5 of orders-0 must be"),
    ({"startingOffsets": '{"orders":[1]}'}, "topic 'orders' must map partitions to offsets"),
    ({"endingOffsets": "latest"}, "endingOffsets is for batch queries only"),
])
def test_bad_options_name_the_problem(options, needle):
    base = dict(BASE)
    for key, value in options.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    with pytest.raises(TxBrokerSourceError) as info:
        parse_options(base, streaming=True)
    assert needle in str(info.value)


@pytest.mark.parametrize(("options", "needle"), [
    ({"startingOffsets": "latest"}, "startingOffsets=latest is not valid for batch queries"),
    ({"startingOffsets": '{"orders":{"0":-1}}'}, "-1 (latest) is not valid for batch"),
    ({"endingOffsets": "earliest"}, "endingOffsets=earliest is not valid for batch queries"),
    ({"endingOffsets": '{"orders":{"0":-2}}'}, "-2 (earliest) is not valid for batch"),
])
def test_batch_only_rules(options, needle):
    assert needle in error_of(streaming=False, **options)


def test_assign_and_offsets_must_agree():
    base = {"kafka.bootstrap.servers": "h:1", "assign": '{"t":[0]}'}
    assert "names t-1, which assign does not" in error_of(
        base=base, startingOffsets='{"t":{"0":1,"1":2}}')


def test_schema_time_validation_accepts_both_kinds():
    # Spark asks for the schema before it says batch or stream: only shared rules apply.
    assert parse_options({**BASE, "endingOffsets": "latest"}, streaming=None).ending == "latest"


def test_offset_json_round_trip_and_order():
    offsets = {("b", 10): 5, ("a", 2): 7, ("a", 10): 1, ("b", 1): 0}
    data = offsets_json(offsets)
    # Same offsets, same text: Spark compares offsets of consecutive triggers.
    assert json.dumps(data) == '{"a": {"2": 7, "10": 1}, "b": {"1": 0, "10": 5}}'
    assert offsets_from_json(data) == offsets
    assert offsets_from_json(json.dumps(data)) == offsets
    assert parse_offsets_json('{"a":{"0":23,"1":-2}}', "startingOffsets") == {
        ("a", 0): 23, ("a", 1): -2}


def test_resolve_offsets():
    tps = [("t", 0), ("t", 1)]
    earliest = {("t", 0): 3, ("t", 1): 0}
    latest = {("t", 0): 10, ("t", 1): 20}
    assert resolve_offsets("startingOffsets", "earliest", tps, earliest, latest) == earliest
    assert resolve_offsets("startingOffsets", "latest", tps, earliest, latest) == latest
    assert resolve_offsets("startingOffsets", {("t", 0): -2, ("t", 1): -1}, tps, earliest,
                           latest) == {("t", 0): 3, ("t", 1): 20}
    with pytest.raises(TxBrokerSourceError, match="every subscribed partition.*lacks t-1"):
        resolve_offsets("startingOffsets", {("t", 0): 5}, tps, earliest, latest)
    with pytest.raises(TxBrokerSourceError, match="u-0 are not subscribed"):
        resolve_offsets("endingOffsets", {("t", 0): 5, ("t", 1): 5, ("u", 0): 1}, tps,
                        earliest, latest)


def test_select_partitions():
    cluster = {"orders": {0: 1, 1: 1}, "orders-dlq": {0: 1}, "users": {0: 1}}
    assert select_partitions(Subscription("subscribePattern", pattern="orders.*"), cluster) == [
        ("orders", 0), ("orders", 1), ("orders-dlq", 0)]
    # A pattern must match the whole name, as Java's Pattern.matches does.
    assert select_partitions(Subscription("subscribePattern", pattern="order"), cluster) == []
    assert select_partitions(Subscription("subscribe", topics=("users",)), cluster) == [
        ("users", 0)]
    with pytest.raises(TxBrokerSourceError, match="do not exist: orders-7"):
        select_partitions(Subscription("assign", assigned=(("orders", 7),)), cluster)


def test_rate_limit_is_proportional_to_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125, ("t", 2): 50}
    assert rate_limit(start, latest, 1000) == latest


def test_rate_limit_moves_every_partition_with_a_backlog():
    start = {("t", 0): 0, ("t", 1): 0}
    end = rate_limit(start, {("t", 0): 10_000, ("t", 1): 1}, 10)
    assert end[("t", 1)] == 1  # a share below one still moves by one
    assert end[("t", 0)] == 9


def test_rate_limit_new_partition_starts_at_zero():
    end = rate_limit({("t", 0): 100}, {("t", 0): 200, ("t", 1): 100}, 50)
    assert end == {("t", 0): 125, ("t", 1): 25}


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
                       min_size=1), st.integers(1, 500))
def test_rate_limit_properties(parts, limit):
    start = {("t", p): a for p, (a, b) in parts.items()}
    latest = {("t", p): a + b for p, (a, b) in parts.items()}
    end = rate_limit(start, latest, limit)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    moved = sum(end[tp] - start[tp] for tp in latest)
    backlog = sum(latest[tp] - start[tp] for tp in latest)
    assert moved == backlog if backlog <= limit else limit - len(parts) <= moved <= limit + \
        len(parts)
    if backlog:
        assert moved > 0


def test_split_ranges_for_min_partitions():
    ranges = [Range("t", 0, 0, 900), Range("t", 1, 0, 100), Range("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    pieces = split_ranges(ranges, 10)
    assert len(pieces) == 10
    for p in (0, 1):
        mine = [r for r in pieces if r.partition == p]
        assert mine[0].start == ranges[p].start and mine[-1].end == ranges[p].end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))
    assert split_ranges([Range("t", 0, 0, 3)], 8) == [Range("t", 0, i, i + 1) for i in range(3)]


def test_bootstrap_parsing():
    assert parse_bootstrap("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(TxBrokerSourceError, match="not host:port"):
        parse_bootstrap("a:1,b")


def test_user_message_finds_the_source_error_in_a_spark_error():
    spark_text = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source `txbroker` read: "
        "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
        "txbroker.spark_jobs.wire.TxBrokerSourceError: cannot connect to kafka.bootstrap.servers="
        "h:1: Connection refused\n\nJVM stacktrace:\norg.apache.spark...\n\tat x")
    assert user_message(RuntimeError(spark_text)) == (
        "cannot connect to kafka.bootstrap.servers=h:1: Connection refused")
    assert user_message(ValueError("[SOME_CLASS] plain\n  at x")) == "[SOME_CLASS] plain"


# --- the reader's fetch loop against a scripted broker -----------------------------------------

class ScriptedClient:
    """Answers fetches from a dict offset -> FetchResult or exception."""

    def __init__(self, answers, earliest=0):
        self.answers = answers
        self.fetched = []
        self._earliest = earliest

    def fetch(self, topic, partition, offset, *, max_bytes):
        self.fetched.append(offset)
        answer = self.answers[offset]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def earliest(self, tps):
        return {tp: self._earliest for tp in tps}

    def close(self):
        pass


def result(buf: bytes, lso: int = 1000) -> FetchResult:
    return FetchResult(buf, [], lso, lso, 0)


def rows(rng, client, **opts):
    options = parse_options({**BASE, **opts}, streaming=False)
    return [r for b in read_range(rng, options, client) for r in b.column("offset").to_pylist()]


def batch(base, n):
    return build_batch([Record(None, b"v") for _ in range(n)], base_offset=base)


def test_reader_follows_batches_to_the_end():
    client = ScriptedClient({0: result(batch(0, 3)), 3: result(batch(3, 3))})
    assert rows(Range("orders", 0, 0, 5), client) == [0, 1, 2, 3, 4]
    assert client.fetched == [0, 3]


def test_reader_fetches_ahead_and_waits_for_that_fetch_when_stopped_early():
    # The Fetch of the next offsets goes out while a fetch's rows are handed to Spark. A
    # read that Spark stops early waits for it: no thread outlives the read with a
    # connection that is about to be closed.
    started, release = threading.Event(), threading.Event()
    done = []

    class Slow(ScriptedClient):
        def fetch(self, topic, partition, offset, *, max_bytes):
            if offset == 3:
                started.set()
                release.wait(10)
                done.append(offset)
            return super().fetch(topic, partition, offset, max_bytes=max_bytes)

    client = Slow({0: result(batch(0, 3)), 3: result(batch(3, 3))})
    reader = read_range(Range("orders", 0, 0, 6), parse_options(BASE, streaming=False), client)
    assert next(reader).column("offset").to_pylist() == [0, 1, 2]
    assert started.wait(10)  # asked for while the first rows are still with Spark
    threading.Timer(0.2, release.set).start()
    reader.close()
    assert done == [3]


def out_of_range(log_start):
    return TxBrokerSourceError("Fetch: OFFSET_OUT_OF_RANGE", "OFFSET_OUT_OF_RANGE",
                               log_start_offset=log_start)


def test_deleted_offsets_fail_by_default():
    client = ScriptedClient({2: out_of_range(10)})
    with pytest.raises(TxBrokerSourceError, match=r"offsets 2-9 of orders-0 were deleted.*"
                                                  r"failOnDataLoss=false"):
        rows(Range("orders", 0, 2, 20), client)


def test_deleted_offsets_skipped_with_fail_on_data_loss_false(caplog):
    client = ScriptedClient({2: out_of_range(10), 10: result(batch(10, 10))})
    assert rows(Range("orders", 0, 2, 20), client, failOnDataLoss="false") == list(range(10, 20))
    assert "were deleted" in caplog.text


def test_partition_shorter_than_planned_is_data_loss():
    client = ScriptedClient({5: FetchResult(b"", [], 3, 3, 0)})
    with pytest.raises(TxBrokerSourceError, match="no longer exist"):
        rows(Range("orders", 0, 5, 9), client)
    assert rows(Range("orders", 0, 5, 9), ScriptedClient({5: FetchResult(b"", [], 3, 3, 0)}),
                failOnDataLoss="false") == []


def test_partition_deleted_while_reading():
    gone = TxBrokerSourceError("topic 'orders' does not exist", "UNKNOWN_TOPIC_OR_PARTITION")
    with pytest.raises(TxBrokerSourceError, match="orders-0 was deleted while offsets 5-8"):
        rows(Range("orders", 0, 5, 9), ScriptedClient({5: gone}))
    assert rows(Range("orders", 0, 5, 9), ScriptedClient({5: gone}),
                failOnDataLoss="false") == []


def test_security_options_take_sparks_names_case_insensitively():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="alice-secret";')
    opts = parse_options({**BASE, "kafka.security.protocol": "sasl_plaintext",
                          "kafka.SASL.mechanism": "SCRAM-SHA-512",
                          "kafka.sasl.jaas.config": jaas}, streaming=True)
    security = opts.security
    assert (security.protocol, security.mechanism, security.username, security.password) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "alice-secret")
    assert parse_options(BASE, streaming=True).security.protocol == "PLAINTEXT"


def test_tls_options_and_pickling(tmp_path):
    import pickle

    from tests.pki import make_ca

    ca = make_ca(tmp_path)
    opts = parse_options({**BASE, "kafka.security.protocol": "SSL",
                          "kafka.ssl.truststore.type": "PEM",
                          "kafka.ssl.truststore.location": str(ca),
                          "kafka.ssl.endpoint.identification.algorithm": ""}, streaming=True)
    assert opts.security.cafile == str(ca) and not opts.security.check_hostname
    # Spark ships options to its workers: they pickle, each worker builds its SSLContext.
    copy = pickle.loads(pickle.dumps(opts))
    assert copy.security.cafile == str(ca) and copy.security.ssl_context() is not None


_WORKER_IMPORTS = """
import sys, types
sys.modules["__main__"].__spec__ = types.SimpleNamespace(name=sys.argv[1])
import txbroker.spark_jobs.source
import kio.static._phantom as phantom
print("kio_hypothesis", phantom.hypothesis is not None)
print("readers", "txbroker.spark_jobs.vectorized" in sys.modules)
import hypothesis
print("hypothesis_importable", hypothesis is not None)
"""


@pytest.mark.parametrize("main, in_worker", [
    ("pyspark.sql.streaming.python_streaming_source_runner", True),
    ("pyspark.daemon", True), ("my_job", False)])
def test_spark_python_workers_import_only_what_they_need(main, in_worker):
    # The streaming planner is a fresh Python process per query, so its imports are part
    # of every query's start: not the decoders. No process imports kio's hypothesis hooks
    # through txbroker (protocol/kio_import.py: the broker never imports a test
    # framework), the driver neither; code that imports hypothesis later still gets it.
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _WORKER_IMPORTS, main], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["kio_hypothesis", "False", "readers", "False",
                   "hypothesis_importable", "True"]
