"""The console in a real browser: Debian's headless Chromium, driven by Selenium through
the system's chromedriver (``make system-deps`` installs both; Selenium Manager never
downloads anything: the driver's path is given), against an in-process broker with
real clients. Screenshots of every page go to test-artifacts/console/ (ignored by git);
``make console-screenshots`` writes them to docs/console/ instead."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .http_client import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parents[3]
SHOTS = Path(os.environ.get("TXBROKER_CONSOLE_SCREENSHOTS") or ROOT / "test-artifacts" / "console")
TOKEN = "browser-test-token"
TID = 'payments-<b id="injected">tx</b>'
GROUP = 'ledger-<img id="injected-img" src=x>'


@pytest.fixture
def txbroker_config(tmp_path):
    path = tmp_path / "admin.token"
    path.write_text(TOKEN)
    os.chmod(path, 0o600)
    return {"admin.http.port": "0", "admin.http.auth.token.file": str(path)}


@pytest.fixture
def browser(monkeypatch):
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.path.exists(path), f"{path} is missing: run `make system-deps`"
    monkeypatch.setenv("SE_OFFLINE", "true")  # belt and braces: Selenium Manager stays offline
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1360,900", "--hide-scrollbars", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def _navigate(driver, element) -> None:
    """Click a link or button and wait for the next page: click() returns before it
    is loaded, and the old page's elements would be found (then go stale)."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element("tag name", "html")
    element.click()
    WebDriverWait(driver, 15).until(lambda d: _gone(old, expected_conditions))
    WebDriverWait(driver, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def _gone(element, expected_conditions) -> bool:
    """selenium's staleness_of, and also chromedriver's other answer for an element
    caught while its page is being replaced ("Node with given id does not belong to
    the document", an unknown error rather than a stale element: a fresh-clone
    make test failed on it once)."""
    from selenium.common.exceptions import WebDriverException

    try:
        return expected_conditions.staleness_of(element)(None)
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise


def _shot(driver, name: str) -> None:
    # The whole page, not just the window: set the height to the document's first.
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1360, min(max(height + 20, 500), 2400))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1360, 900)


def _pipeline(txbroker) -> Producer:
    """payments-0: two committed records, an aborted one, then an open transaction of
    two records; a group that committed offset 1."""
    txbroker.create_topic("payments", 2)
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": TID})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("payments", key=b"order-1", value=b'{"amount": 12.5, "note": "<b>paid</b>"}',
              partition=0, headers=[("source", b"web")])
    p.produce("payments", key=b"order-2", value=b'{"amount": 7}', partition=0)
    p.commit_transaction(10)
    p.begin_transaction()
    p.produce("payments", key=b"order-3", value=b"ABORTED-RECORD", partition=0)
    assert p.flush(10) == 0
    p.abort_transaction(10)
    p.begin_transaction()
    p.produce("payments", key=b"order-4", value=b'{"amount": 99}', partition=0)
    p.produce("payments", key=b"order-5", value=b'{"amount": 1}', partition=0)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("payments", 0, 1)], asynchronous=False)
    c.close()
    return p


def test_console_in_a_browser(txbroker, browser):
    from selenium.webdriver.common.by import By

    producer = _pipeline(txbroker)
    # order-1, order-2, COMMIT, order-3, ABORT | order-4, order-5 (open)
    assert (txbroker.last_stable_offset("payments"), txbroker.high_watermark("payments")) == (5, 7)
    port = txbroker.call(lambda b: b.admin_http.port)
    base = f"http://127.0.0.1:{port}"
    d = browser
    find = d.find_element

    d.get(base + "/")
    assert "/console/login" in d.current_url  # the token is needed
    find(By.ID, "token").send_keys(TOKEN)
    _navigate(d, find(By.ID, "login"))
    assert find(By.TAG_NAME, "h1").text == "Overview"
    assert "PLAINTEXT" in find(By.ID, "listeners").text

    # The open transaction: listed with its age, escaped, holding the LSO back.
    d.get(base + "/console/transactions")
    row = find(By.XPATH, "//table[@id='transactions']//tr[td/a[@class='tid']]")
    assert row.find_element(By.CLASS_NAME, "tid").text == TID  # shown as text...
    assert not d.find_elements(By.ID, "injected")  # ...never as markup
    assert row.find_element(By.CLASS_NAME, "state").text == "Ongoing"
    assert row.find_element(By.CLASS_NAME, "age").text.endswith(" s")
    _shot(d, "transactions")

    d.get(base + "/console/topics/payments/0")
    assert (find(By.ID, "lso").text, find(By.ID, "hw").text, find(By.ID, "held").text) \
        == ("5", "7", "2")
    assert "open" in find(By.ID, "producers").text

    # Records: read_uncommitted shows the aborted record as such and the markers.
    d.get(base + "/console/topics/payments/0/records?offset=0&isolation=read_uncommitted")
    records = find(By.ID, "records").text
    assert "ABORTED-RECORD" in records and "COMMIT marker" in records
    assert d.find_elements(By.CSS_SELECTOR, "#records .aborted")
    _shot(d, "records-read-uncommitted")
    _navigate(d, find(By.ID, "read_committed"))  # the isolation switch
    records = find(By.ID, "records").text
    assert "ABORTED-RECORD" not in records and "order-4" not in records
    assert "order-1" in records and "order-2" in records
    _shot(d, "records-read-committed")

    # The group's lag: 6 against the high watermark, 4 against the LSO.
    d.get(base + "/console/groups")
    link = find(By.CSS_SELECTOR, "#groups a.group")
    assert link.text == GROUP and not d.find_elements(By.ID, "injected-img")
    _shot(d, "groups")
    _navigate(d, link)
    assert find(By.CSS_SELECTOR, "#offsets .lag-hw").text == "6"
    assert find(By.CSS_SELECTOR, "#offsets .lag-lso").text == "4"
    _shot(d, "group")

    # Abort: the confirmation page, then the LSO catches up.
    d.get(base + "/console/transactions")
    _navigate(d, find(By.CSS_SELECTOR, "#transactions a.abort"))
    assert find(By.TAG_NAME, "h1").text == "Abort transaction"
    _shot(d, "abort-confirm")
    _navigate(d, find(By.ID, "confirm-abort"))
    assert "Aborting the transaction of" in find(By.ID, "flash").text
    wait_for(lambda: txbroker.last_stable_offset("payments") == 8, what="the ABORT marker")
    d.get(base + "/console/topics/payments/0")
    assert (find(By.ID, "lso").text, find(By.ID, "held").text) == ("8", "0")
    _shot(d, "partition")
    d.get(base + "/console/topics/payments/0/records?offset=0&isolation=read_committed")
    records = find(By.ID, "records").text
    assert "order-4" not in records and "ABORTED-RECORD" not in records
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # fenced by the abort

    d.get(base + "/console/topics")
    _shot(d, "topics")
    d.get(base + "/console/security")
    _shot(d, "security")
    # The overview's charts are drawn by the page's script from /console/api/rates.
    d.get(base + "/")
    if os.environ.get("TXBROKER_CONSOLE_SCREENSHOTS"):
        _traffic(txbroker, seconds=20)  # for the docs: charts with something on them
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#chart-txn svg polyline"),
             timeout=15, what="the charts")
    _shot(d, "overview")

    # A full disk (what a refused append reports): a visible banner on every page.
    assert not d.find_elements(By.ID, "storage-banner")
    txbroker.call(lambda b: b.logs.disk.refused(
        OSError(errno.ENOSPC, "No space left on device", b.logs.data_dir),
        "append to payments-0"))
    for path in ("/", "/console/topics", "/console/transactions"):
        d.get(base + path)
        banner = d.find_element(By.ID, "storage-banner")
        assert banner.is_displayed() and "disk_full" in banner.text, path
        assert banner.location["y"] < 200  # above the page's own content
    _shot(d, "storage-banner")


def _traffic(txbroker, seconds: float) -> None:
    """Transactions of a few records, every 10th aborted, for ``seconds``."""
    p = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "traffic",
                  "linger.ms": 5})
    p.init_transactions(10)
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        p.begin_transaction()
        for i in range(20):
            p.produce("payments", value=b"x" * 200, partition=1, key=b"%d" % i)
        if n % 10 == 9:
            p.flush(10)
            p.abort_transaction(10)
        else:
            p.commit_transaction(10)
        n += 1


@pytest.mark.parametrize("txbroker_config", [{
    "admin.http.port": "0", "txbroker.share.version": "1",
    "txbroker.share.auto.offset.reset": "earliest"}])
def test_share_group_page_in_a_browser(txbroker, browser):
    """A share group (KIP-932) with a real ShareConsumer: listed on the groups page, and
    its page renders each share-partition's window, records by state and lag."""
    from selenium.webdriver.common.by import By

    from tests.integration.test_share_groups import ck, poll_until, produce, share_consumer

    txbroker.create_topic("jobs", 2)
    produce(txbroker.bootstrap, "jobs", 8)  # round-robin or sticky: 8 over the 2 partitions
    c = share_consumer(txbroker.bootstrap, "workers", "jobs", explicit=True)
    try:
        got = poll_until(c, 8)
        assert len(got) == 8
        for m in got:
            c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        c.commit_sync(10)
        port = txbroker.call(lambda b: b.admin_http.port)
        d = browser
        d.get(f"http://127.0.0.1:{port}/console/groups")
        link = d.find_element(By.CSS_SELECTOR, "#share-groups a.share-group")
        assert link.text == "workers"
        _navigate(d, link)
        assert d.find_element(By.TAG_NAME, "h1").text == "Share group"
        rows = d.find_elements(By.CSS_SELECTOR, "#share-partitions tbody tr")
        # Every record accepted: each partition's window is empty and its lag 0.
        assert [r.find_element(By.TAG_NAME, "a").text for r in rows] == ["jobs-0", "jobs-1"]
        assert [r.find_element(By.CLASS_NAME, "share-lag").text for r in rows] == ["0", "0"]
        assert sum(int(r.find_elements(By.TAG_NAME, "td")[1].text) for r in rows) == 8
        assert "Stable" in d.find_element(By.CLASS_NAME, "kv").text
        _shot(d, "share-group")
    finally:
        c.close()


@pytest.mark.parametrize("txbroker_config", [{
    "admin.http.port": "0", "txbroker.streams.version": "1"}])
def test_streams_group_page_in_a_browser(txbroker, browser):
    """A streams group (KIP-1071) made by raw StreamsGroupHeartbeat requests: listed on
    the groups page, and its page renders its topology and each member's tasks."""
    from selenium.webdriver.common.by import By

    from .test_console_streams_groups import stable_streams_group

    owned = stable_streams_group(txbroker, "payments-app")
    port = txbroker.call(lambda b: b.admin_http.port)
    d = browser
    d.get(f"http://127.0.0.1:{port}/console/groups")
    link = d.find_element(By.CSS_SELECTOR, "#streams-groups a.streams-group")
    assert link.text == "payments-app"
    _navigate(d, link)
    assert d.find_element(By.TAG_NAME, "h1").text == "Streams group"
    assert d.find_element(By.ID, "topology-status").text == "ready"
    rows = d.find_elements(By.CSS_SELECTOR, "#members tbody tr")
    shown = {r.find_element(By.TAG_NAME, "td").text:
             (r.find_element(By.CLASS_NAME, "current-active").text,
              r.find_element(By.CLASS_NAME, "target-active").text) for r in rows}
    assert shown == {m: (f"{s}_{p}", f"{s}_{p}") for m, [(s, p)] in
                     ((m, sorted(ts)) for m, ts in owned.items())}
    _shot(d, "streams-group")
