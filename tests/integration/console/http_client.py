"""A small HTTP client for the console tests: a cookie jar (the console's login), no
redirect following when asked (to see a 303), form posts."""

from __future__ import annotations

import http.cookiejar
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class ConsoleClient:
    def __init__(self, base: str, context: ssl.SSLContext | None = None) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        handlers = [urllib.request.HTTPCookieProcessor(self.jar)]
        if context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self.opener = urllib.request.build_opener(*handlers)
        self.plain = urllib.request.build_opener(*handlers, _NoRedirect)

    def request(self, path: str, data: dict | None = None, *, follow: bool = True,
                headers: dict | None = None) -> tuple[int, str, dict]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.base + path, data=body, headers=headers or {})
        opener = self.opener if follow else self.plain
        try:
            with opener.open(req, timeout=10) as resp:
                return resp.status, resp.read().decode(), dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def get(self, path: str, **kw) -> tuple[int, str]:
        status, body, _ = self.request(path, **kw)
        return status, body

    def post(self, path: str, data: dict, **kw) -> tuple[int, str]:
        status, body, _ = self.request(path, data, **kw)
        return status, body

    def login(self, token: str) -> None:
        status, body = self.post("/console/login", {"token": token, "next": "/"})
        assert status == 200 and "<h1>Overview</h1>" in body, (status, body[:500])


def form_fields(body: str) -> dict[str, str]:
    """The hidden inputs of the (first) POST form of a page."""
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body))


def text_of(body: str, element_id: str) -> str:
    m = re.search(rf'id="{re.escape(element_id)}"[^>]*>([^<]*)<', body)
    assert m, f"no element #{element_id}"
    return m.group(1)


def wait_for(condition, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
