"""The admin HTTP endpoint over HTTPS (admin.http.ssl.*, optional client certificates)
and behind a bearer token (admin.http.auth.token.file), as Prometheus scrapes it."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from txbroker.testing import BrokerThread

from tests.pki import make_ca, make_cert

TOKEN = "s3cret-token-for-prometheus"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_ca(d)
    make_cert(d, "server", "localhost")
    make_cert(d, "prometheus", "prometheus", san=None)
    make_ca(d, "other")
    make_cert(d, "stranger", "stranger", ca="other", san=None)
    return d


def _start(tmp_path: Path, config: dict[str, str]) -> BrokerThread:
    broker = BrokerThread(str(tmp_path / "data"), {"admin.http.port": "0", **config})
    broker.start()
    return broker


def _get(url: str, token: str | None = None, context: ssl.SSLContext | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=10, context=context) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def _client_context(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(pki / f"{cert}.pem", pki / f"{cert}.key")
    return ctx


def test_bearer_token_protects_everything_but_health(tmp_path) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    broker = _start(tmp_path, {"admin.http.auth.token.file": str(token_file)})
    try:
        base = f"http://127.0.0.1:{broker.call(lambda b: b.admin_http.port)}"
        assert _get(base + "/health")[:2] == (200, "ok\n")
        status, _, headers = _get(base + "/metrics")
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="txbroker"'
        assert _get(base + "/topics", token="wrong")[0] == 401
        # A wrong token makes the address wait 0.5 s: the right one is refused meanwhile.
        status, _, headers = _get(base + "/metrics", token=TOKEN)
        assert status == 429 and headers["Retry-After"] == "1"
        time.sleep(0.6)
        status, body, _ = _get(base + "/metrics", token=TOKEN)
        assert status == 200 and "txbroker_requests_total" in body
        assert 'txbroker_console_login_failures_total{reason="wrong_token"} 1' in body
        assert 'txbroker_console_login_failures_total{reason="throttled"} 1' in body
        # Rotation: a new token in the file is used at once, the old one is refused.
        token_file.write_text("rotated-token-of-another-length\n")
        assert _get(base + "/topics", token=TOKEN)[0] == 401
        time.sleep(0.6)
        assert _get(base + "/topics", token="rotated-token-of-another-length")[0] == 200
    finally:
        broker.stop()


def test_https_with_a_pem_keystore_and_required_client_certificates(tmp_path, pki) -> None:
    broker = _start(tmp_path, {
        "admin.http.ssl.keystore.location": str(pki / "server-keystore.pem"),
        "admin.http.ssl.truststore.location": str(pki / "ca.pem"),
        "admin.http.ssl.client.auth": "required"})
    try:
        url = f"https://localhost:{broker.call(lambda b: b.admin_http.port)}/metrics"
        status, body, _ = _get(url, context=_client_context(pki, "prometheus"))
        assert status == 200 and "txbroker_requests_total" in body
        for refused in (_client_context(pki), _client_context(pki, "stranger")):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                _get(url, context=refused)
        # Plain HTTP to the HTTPS port gets no answer.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _get(url.replace("https://", "http://"))
    finally:
        broker.stop()


def test_bad_settings_stop_the_start_with_one_line(tmp_path, pki) -> None:
    for config, message in (
        ({"admin.http.auth.token.file": str(tmp_path / "missing")},
         "cannot read admin.http.auth.token.file"),
        ({"admin.http.ssl.keystore.location": str(pki / "ca.pem")},
         "admin.http.ssl.keystore.location"),
        ({"admin.http.ssl.keystore.location": str(pki / "server-keystore.pem"),
          "admin.http.ssl.client.auth": "required"},
         "needs admin.http.ssl.truststore.location"),
    ):
        broker = BrokerThread(str(tmp_path / "data"), {"admin.http.port": "0", **config})
        with pytest.raises(Exception, match=message):
            broker.start()
        broker.stop()
