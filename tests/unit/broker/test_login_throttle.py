"""The console login's and the admin bearer token's rate limit per client address
(broker/console/throttle.py), on an injected clock: the wait doubles from 0.5 s to its
cap, a success resets it, the table stays bounded under a flood of addresses; and the
admin endpoint answers 429 while an address waits and counts the refusals in /metrics."""

from __future__ import annotations

import asyncio
import types

from aiohttp.test_utils import TestClient, TestServer
from txbroker.broker.admin_http import build_app
from txbroker.broker.console import ConsoleAuth
from txbroker.broker.console.throttle import LoginThrottle, client_key
from txbroker.broker.metrics import BrokerMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_wait_doubles_up_to_its_cap_and_a_success_resets_it():
    clock = Clock()
    throttle = LoginThrottle(first=0.5, cap=30.0, clock=clock)
    assert throttle.wait("10.0.0.1") == 0
    waits = []
    for _ in range(9):
        waits.append(throttle.failed("10.0.0.1"))
        clock.now += 100  # (tried again after the wait)
    assert waits == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    clock.now += 0
    throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 30
    clock.now += 29
    assert throttle.wait("10.0.0.1") == 1
    assert throttle.wait("10.0.0.2") == 0  # another address is not held back
    throttle.succeeded("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 0 and throttle.failed("10.0.0.1") == 0.5


def test_an_address_idle_long_enough_starts_again():
    clock = Clock()
    throttle = LoginThrottle(clock=clock, forget_after=900)
    for _ in range(5):
        throttle.failed("10.0.0.1")
    clock.now += 1000
    assert throttle.wait("10.0.0.1") == 0
    assert throttle.failed("10.0.0.1") == 0.5


def test_a_flood_of_addresses_cannot_grow_the_table():
    clock = Clock()
    throttle = LoginThrottle(max_entries=100, clock=clock)
    throttle.failed("192.0.2.1")
    for i in range(10_000):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle) == 100
    # The least recently failed went first; the newest are kept.
    assert throttle.wait("192.0.2.1") == 0
    assert throttle.wait("10.0.39.15") == 0.5


def test_an_ipv6_client_is_counted_by_its_64():
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:1") == "2001:db8::/64"
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert client_key(None) == "?"


class _Token:
    def load(self) -> bytes:
        return b"secret"

    def accepts(self, header: str | None) -> bool:
        return header == "Bearer secret"


def _app(clock: Clock) -> tuple[object, BrokerMetrics]:
    metrics = BrokerMetrics()
    broker = types.SimpleNamespace(metrics=metrics, stopping=asyncio.Event())
    auth = ConsoleAuth(_Token(), read_only=False, principal="User:admin", secure=False,
                       throttle=LoginThrottle(clock=clock),
                       on_failure=metrics.count_login_failure)
    return build_app(broker, _Token(), auth), metrics


def test_the_endpoint_refuses_tries_while_an_address_waits_and_counts_them():
    clock = Clock()

    async def run() -> None:
        app, metrics = _app(clock)
        async with TestClient(TestServer(app)) as client:
            async def login(token: str) -> int:
                r = await client.post("/console/login", data={"token": token, "next": "/"},
                                      allow_redirects=False)
                return r.status

            assert await login("wrong") == 303  # back to the login page
            assert await login("secret") == 429  # within 0.5 s: not even compared
            r = await client.post("/console/login", data={"token": "x", "next": "/"},
                                  allow_redirects=False)
            assert r.status == 429 and r.headers["Retry-After"] == "1"
            clock.now += 0.5
            assert await login("wrong") == 303
            clock.now += 0.5
            assert await login("wrong") == 429  # now 1 s
            clock.now += 0.5
            assert await login("secret") == 303  # (the session cookie's redirect)
            assert metrics.login_failures == {"wrong_token": 2, "throttled": 3}
            # A wrong bearer token counts the same, and the success above reset it.
            r = await client.get("/topics", headers={"Authorization": "Bearer guess"})
            assert r.status == 401
            r = await client.get("/topics", headers={"Authorization": "Bearer secret"})
            assert r.status == 429
            assert metrics.login_failures == {"wrong_token": 3, "throttled": 4}

    asyncio.run(run())
