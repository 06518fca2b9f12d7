"""Who may look and who may act.

Reading: the admin endpoint's bearer token (admin.http.auth.token.file), sent by a
browser as a session cookie set by /console/login (the cookie is an HMAC of the token,
so rotating the token logs every browser out). Failed logins make their client address
wait, longer after each (broker/console/throttle.py). Without a token file the endpoint is
open to whoever reaches it (loopback by default), as /metrics is.

Acting (aborting a transaction): only with a token file (an operator proved to be one),
never when admin.http.console.read.only is true; the form carries a CSRF token (an HMAC
bound to the token), the cookie is SameSite=Strict, and a cross-site Origin is refused.
With an authorizer on, the action is checked against the ACLs as
admin.http.console.principal, as the equivalent Kafka request would be.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Callable
from typing import NoReturn, Protocol
from urllib.parse import quote, urlsplit

from aiohttp import web

from .throttle import LoginThrottle

COOKIE = "txbroker_console"
_PROCESS_KEY = os.urandom(32)  # CSRF key when no token file is set (actions are off then)


class BearerToken(Protocol):
    """broker/admin_http.py's BearerToken (which imports this package)."""

    def load(self) -> bytes: ...

    def accepts(self, header: str | None) -> bool: ...


class ConsoleAuth:
    def __init__(self, token: BearerToken | None, *, read_only: bool, principal: str,
                 secure: bool, throttle: LoginThrottle | None = None,
                 on_failure: Callable[[str], None] | None = None) -> None:
        self.token = token
        self.read_only = read_only
        self.principal = principal
        self.secure = secure
        # Failed logins per client address (shared with the bearer token's check), and
        # who counts them (the broker's metrics): reason "wrong_token" or "throttled".
        self.throttle = throttle if throttle is not None else LoginThrottle()
        self.on_failure = on_failure

    def _mac(self, purpose: bytes) -> str:
        key = self.token.load() if self.token is not None else _PROCESS_KEY
        return hmac.new(key, b"txbroker console " + purpose, hashlib.sha256).hexdigest()

    @property
    def can_act(self) -> bool:
        return self.token is not None and not self.read_only

    def why_read_only(self) -> str:
        if self.read_only:
            return "the console is read-only (admin.http.console.read.only=true)"
        return "actions need the admin token: set admin.http.auth.token.file"

    def has_session(self, request: web.Request) -> bool:
        """The request carries the token: the bearer header, or the login's cookie."""
        if self.token is None:
            return False
        if self.token.accepts(request.headers.get("Authorization")):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie, self._mac(b"session"))

    def csrf_token(self) -> str:
        return self._mac(b"csrf")

    def check_post(self, request: web.Request, form) -> str | None:
        """Why this state-changing POST is refused, or None."""
        if not self.can_act:
            return self.why_read_only()
        if not self.has_session(request):
            return "not logged in with the admin token"
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            return f"cross-site request from {origin}"
        if not hmac.compare_digest(str(form.get("csrf", "")), self.csrf_token()):
            return "missing or wrong CSRF token (reload the page)"
        return None

    def _failed(self, reason: str) -> None:
        if self.on_failure is not None:
            self.on_failure(reason)

    def login(self, given: str, next_path: str, address: str | None = None) -> NoReturn:
        """Raises the redirect: to ``next_path`` with the session cookie, or back to the
        login page; or 429 while ``address`` must still wait after a failure (the token
        is not even compared then: guessing costs the guesser time, not the broker)."""
        wait = self.throttle.wait(address)
        if wait > 0:
            self._failed("throttled")
            seconds = math.ceil(wait)
            raise web.HTTPTooManyRequests(
                text=f"too many failed logins from {address}: try again in {seconds} s\n",
                headers={"Retry-After": str(seconds)})
        if self.token is None or not hmac.compare_digest(given.strip().encode(),
                                                         self.token.load()):
            if self.token is not None:
                self._failed("wrong_token")
                self.throttle.failed(address)
            raise web.HTTPSeeOther("/console/login?failed=1&next=" +
                                   quote(_local(next_path), safe=""))
        self.throttle.succeeded(address)
        response = web.HTTPSeeOther(_local(next_path))
        response.set_cookie(COOKIE, self._mac(b"session"), httponly=True, samesite="Strict",
                            secure=self.secure, path="/")
        raise response


def _local(path: str) -> str:
    """Only a path on this endpoint (no open redirect to another site)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def who(request: web.Request, auth: ConsoleAuth) -> str:
    """For the INFO line of an action: the principal acted as and where from."""
    return f"{auth.principal} (admin token, console, from {request.remote})"
