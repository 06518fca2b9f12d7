"""broker/metrics.py: histograms, error codes found in responses, the text format."""

import datetime
import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from txbroker.broker import metrics as metrics_module
from txbroker.broker.metrics import BrokerMetrics, Histogram, response_error_codes
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, response_class, response_module


def test_histogram_buckets_are_cumulative_and_parse():
    h = Histogram((0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.05, 0.05, 3.0):
        h.observe(v)
    text = "# TYPE t histogram\n" + "\n".join(h.samples("t", 'api="x"')) + "\n"
    [family] = text_string_to_metric_families(text)
    got = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    # A value equal to a bound is in that bucket ("le").
    assert got[("t_bucket", "0.001")] == 2
    assert got[("t_bucket", "0.01")] == 2
    assert got[("t_bucket", "0.1")] == 4
    assert got[("t_bucket", "+Inf")] == 5
    assert got[("t_count", None)] == 5
    assert abs(got[("t_sum", None)] - 3.1015) < 1e-9


def test_error_codes_are_found_at_every_level_of_a_response():
    m = response_module(1, 12)  # Fetch v12: top-level and per-partition codes
    part = lambda index, error: build(  # noqa: E731
        m.PartitionData, partition_index=index, error_code=error, high_watermark=0,
        last_stable_offset=0, log_start_offset=0, aborted_transactions=None,
        preferred_read_replica=-1, records=b"")
    response = build(response_class(1, 12), throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.none, session_id=0, responses=(
                         build(m.FetchableTopicResponse, topic="t", partitions=(
                             part(0, ErrorCode.none),
                             part(1, ErrorCode.offset_out_of_range),
                             part(2, ErrorCode.unknown_topic_or_partition))),))
    assert response_error_codes(response) == [ErrorCode.offset_out_of_range.value,
                                              ErrorCode.unknown_topic_or_partition.value]


def test_request_done_counts_reported_codes_and_bytes():
    metrics = BrokerMetrics()
    metrics.request_done(26, 1, 0.0, 100, b"...", b"x" * 12, (ErrorCode.producer_fenced.value,))
    metrics.request_done(26, 1, 0.0, 50, b"...", b"x" * 12, ())
    stats = metrics.requests[(26, 1)]
    assert (stats.count, stats.bytes_in, stats.bytes_out) == (2, 158, 24)
    assert metrics.errors == {(26, ErrorCode.producer_fenced.value): 1}
    assert stats.time.count == 2


DOCS = Path(__file__).resolve().parents[3] / "docs"


def _emitted_families() -> set[str]:
    source = Path(metrics_module.__file__).read_text()
    names = set(re.findall(r'"(txbroker_[a-z_]+)"', source))
    names |= {f"txbroker_partition_{name}" for name, _, _ in metrics_module._PARTITION_GAUGES}
    return names


def test_operations_doc_lists_every_metric():
    text = (DOCS / "operations.md").read_text()
    missing = [name for name in sorted(_emitted_families()) if f"`{name}`" not in text]
    assert not missing, f"docs/operations.md does not describe {missing}"


def test_grafana_dashboard_uses_metrics_the_broker_serves():
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    emitted = _emitted_families()
    for expr in exprs:
        for name in re.findall(r"txbroker_[a-z_]+", expr):
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert family in emitted, f"{name} in the dashboard is not served: {expr}"
