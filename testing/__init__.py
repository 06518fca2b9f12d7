"""Test harness, for users' test suites and ours: the pytest plugin (pytest_plugin.py,
the ``txbroker`` fixture), an in-process broker on an ephemeral port
(broker_thread.py, ``BrokerThread``), the broker as a real process
(broker_process.py, ``BrokerProcess``) and throwaway certificates, listeners and users
for a secured one (security.py). docs/testing.md is the user's guide.

    from txbroker.testing import BrokerThread

    with BrokerThread(data_dir) as broker:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)

The classes are imported on first use, not with this package: the pytest plugin is
loaded at pytest's start-up, before hypothesis is set up, and the broker imports kio,
whose types register hypothesis strategies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .broker_process import BrokerProcess
    from .broker_thread import BrokerThread

__all__ = ["BrokerProcess", "BrokerThread"]


def __getattr__(name: str):
    if name == "BrokerThread":
        from .broker_thread import BrokerThread

        return BrokerThread
    if name == "BrokerProcess":
        from .broker_process import BrokerProcess

        return BrokerProcess
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
