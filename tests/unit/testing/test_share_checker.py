"""The share-group checker on hand-made histories: each planted anomaly is reported,
redeliveries are statistics, and the workers' history lines parse as written."""

from __future__ import annotations

import json

from txbroker.testing.chaos.checker import InputRecord
from txbroker.testing.chaos.recipes.confluent_share_worker import History
from txbroker.testing.chaos.share_checker import (
    CONFIRMED,
    FAILED,
    UNKNOWN,
    Accept,
    Delivery,
    check_share,
    parse_history,
)

INPUTS = [InputRecord(f"in-{i}", "jobs", 0, i) for i in range(3)]
LIMIT = 10


def d(worker: str, seq: int, offset: int, count: int = 1, at: float = 1.0) -> Delivery:
    return Delivery(worker, seq, "jobs", 0, offset, f"in-{offset}", count, at)


def clean_history():
    """w1 polls all three, is killed before answering for in-2; w2 gets in-2 again."""
    deliveries = [d("w1", 1, 0), d("w1", 2, 1), d("w1", 3, 2), d("w2", 1, 2, count=2, at=5.0)]
    accepts = [Accept("w1", 1, CONFIRMED, 2.0), Accept("w1", 2, CONFIRMED, 2.0),
               Accept("w2", 1, CONFIRMED, 6.0)]
    return deliveries, accepts


def test_a_clean_history_with_a_redelivery_is_ok():
    report = check_share(INPUTS, *clean_history(), delivery_count_limit=LIMIT)
    assert report.ok, report.text()
    assert report.stats["redelivered"] == 1 and report.stats["most deliveries"] == 2
    assert report.stats["accepts confirmed"] == 3


def test_a_lost_record_is_reported():
    deliveries, accepts = clean_history()
    report = check_share(INPUTS, deliveries, accepts[:2], delivery_count_limit=LIMIT)
    assert report.counts == {"lost": 1}
    assert report.anomalies["lost"][0]["id"] == "in-2"
    assert report.anomalies["lost"][0]["delivery_counts"] == [1, 2]


def test_a_failed_accept_does_not_count_and_an_unknown_one_does():
    deliveries, accepts = clean_history()
    failed = [*accepts[:2], Accept("w2", 1, FAILED, 6.0, "INVALID_RECORD_STATE")]
    assert check_share(INPUTS, deliveries, failed, delivery_count_limit=LIMIT).counts == \
        {"lost": 1}
    unknown = [*accepts[:2], Accept("w2", 1, UNKNOWN, 6.0)]
    assert check_share(INPUTS, deliveries, unknown, delivery_count_limit=LIMIT).ok


def test_a_record_delivered_up_to_the_limit_is_archived_not_lost():
    deliveries = [*clean_history()[0], d("w3", 1, 2, count=LIMIT, at=9.0)]
    accepts = clean_history()[1][:2]
    report = check_share(INPUTS, deliveries, accepts, delivery_count_limit=LIMIT)
    assert report.ok and report.stats["archived"] == 1, report.text()


def test_a_double_accept_is_reported():
    deliveries, accepts = clean_history()
    deliveries.append(d("w2", 2, 0, count=2, at=7.0))
    accepts.append(Accept("w2", 2, CONFIRMED, 8.0))
    report = check_share(INPUTS, deliveries, accepts, delivery_count_limit=LIMIT)
    assert report.counts["accepted-twice"] == 1
    assert report.anomalies["accepted-twice"][0]["at"] == "jobs-0@0"
    # (and in-0 came back after its ACCEPT was confirmed)
    assert report.counts["delivered-after-accept"] == 1


def test_a_delivery_after_a_confirmed_accept_is_reported():
    deliveries, accepts = clean_history()
    deliveries.append(d("w2", 2, 1, count=2, at=7.0))  # in-1 was accepted at 2.0
    report = check_share(INPUTS, deliveries, accepts, delivery_count_limit=LIMIT)
    assert report.counts == {"delivered-after-accept": 1}, report.text()
    example = report.anomalies["delivered-after-accept"][0]
    assert example["accepted"] == {"worker": "w1", "delivery_count": 1}
    assert example["then"]["delivery_count"] == 2


def test_the_same_count_polled_after_the_confirmation_is_reported_before_it_is_not():
    deliveries, accepts = clean_history()
    before = check_share(INPUTS, [*deliveries, d("w3", 1, 1, count=1, at=1.5)], accepts,
                         delivery_count_limit=LIMIT)
    assert before.ok, before.text()
    after = check_share(INPUTS, [*deliveries, d("w3", 1, 1, count=1, at=3.0)], accepts,
                        delivery_count_limit=LIMIT)
    assert after.counts == {"delivered-after-accept": 1}


def test_a_delivery_the_log_does_not_have_is_reported():
    deliveries, accepts = clean_history()
    deliveries.append(Delivery("w2", 9, "jobs", 0, 7, "in-7", 1, 3.0))
    report = check_share(INPUTS, deliveries, accepts, delivery_count_limit=LIMIT)
    assert report.counts == {"unknown-record": 1}
    assert "unknown-record: 1" in report.text()


def test_history_lines_as_the_worker_writes_them(tmp_path):
    h = History(str(tmp_path), "0")
    a = h.delivered("jobs", 0, 0, "in-0", 1)
    b = h.delivered("jobs", 0, 1, "in-1", 1)
    c = h.delivered("jobs", 0, 2, "in-2", 1)
    h.sent([a, b])
    h.answered([a], None)
    h.answered([b], "INVALID_RECORD_STATE")
    h.sent([c])  # then killed: no answer
    (path,) = tmp_path.iterdir()
    lines = [*path.read_text().splitlines(), '{"d": ["jobs", 0, 3']  # a torn last line
    deliveries, accepts = parse_history(lines)
    assert [x.offset for x in deliveries] == [0, 1, 2]
    assert [(x.seq, x.outcome) for x in accepts] == [(a, CONFIRMED), (b, FAILED), (c, UNKNOWN)]
    assert all(x.worker == h.worker for x in accepts)
    assert json.loads(lines[0])["w"] == h.worker


def test_the_drain_waits_no_more_for_accepted_or_archived_records():
    from txbroker.testing.chaos.share_run import settled

    deliveries = [d("w1", 1, 0), d("w1", 2, 1), d("w1", 3, 2, count=LIMIT - 1),
                  d("w2", 1, 2, count=LIMIT), d("w2", 2, 1, count=2)]
    accepts = [Accept("w1", 1, CONFIRMED), Accept("w1", 2, FAILED), Accept("w2", 2, UNKNOWN)]
    # in-0 confirmed, in-1 failed once then unknown, in-2 delivered up to the limit.
    assert settled(deliveries, accepts, LIMIT) == {"in-0", "in-1", "in-2"}
    assert settled(deliveries[:3], accepts[:2], LIMIT) == {"in-0"}
