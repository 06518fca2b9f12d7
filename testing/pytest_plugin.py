"""pytest plugin (entry point ``txbroker``): the ``txbroker`` fixture.

Installed with the package, so any test suite can write::

    def test_roundtrip(txbroker):
        producer = KafkaProducer(bootstrap_servers=txbroker.bootstrap)

Each test gets a fresh in-process broker on an ephemeral port with its own
temporary data directory. ``txbroker_config`` (a dict fixture you may override)
passes broker config keys, e.g. ``{"num.partitions": "3"}``; they are applied over
``FIXTURE_DEFAULTS``. ``txbroker_security`` (None by default) starts a secured broker
instead: e.g. ``{"listeners": ["PLAINTEXT", "SASL_SSL"], "users": {"alice": "pw"}}``
(BrokerThread's keyword arguments); the fixture then offers ``bootstrap_for(listener)``,
``client_config(listener, user)`` and ``certs``.
"""

from __future__ import annotations

import pytest

# What differs from the broker's defaults in tests: a group's first rebalance does not
# wait group.initial.rebalance.delay.ms (3 s) for more members to join, nor a streams
# group's first task assignment group.streams.initial.rebalance.delay.ms (3 s), as a
# test rarely has more than one arriving at once (Kafka's own test configs do the same).
FIXTURE_DEFAULTS: dict[str, str] = {"group.initial.rebalance.delay.ms": "0",
                                    "group.streams.initial.rebalance.delay.ms": "0"}


def pytest_configure(config) -> None:
    # The in-process broker's thread and the test thread must not build ASTs at the
    # same time on CPython 3.11.0-3.11.7 (testing/thread_safe_ast.py).
    from .thread_safe_ast import serialize_ast_parse, serialize_pytest_rewrite

    serialize_ast_parse()
    serialize_pytest_rewrite(config)


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    """Override in your conftest.py to change broker config for the txbroker fixture."""
    return {}


@pytest.fixture
def txbroker_security() -> dict | None:
    """Override in your conftest.py (or parametrize) to secure the txbroker fixture."""
    return None


@pytest.fixture
def txbroker(tmp_path, txbroker_config, txbroker_security):
    """A running in-process broker: ``.bootstrap`` is "host:port"."""
    # Imported here, not at plugin load: the broker pulls in kio. kio registers
    # hypothesis strategies for its types when it can import hypothesis (~0.4 s of the
    # first fixture's set-up); a broker never generates test data, so kio is imported
    # with hypothesis hidden unless the session has already imported hypothesis.
    from txbroker.protocol.kio_import import import_kio_without_hypothesis

    import_kio_without_hypothesis()
    from .broker_thread import BrokerThread

    broker = BrokerThread(str(tmp_path / "txbroker-data"),
                          {**FIXTURE_DEFAULTS, **(txbroker_config or {})},
                          **(txbroker_security or {}))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
