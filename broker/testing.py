"""Moved to ``txbroker.testing`` (testing/broker_thread.py); kept for existing imports:
``from txbroker.broker.testing import BrokerThread`` still works. New code:
``from txbroker.testing import BrokerThread``. (An alias: tests/unit/test_layers.py
allows it this one import against the layers, and no product module may import it.)"""

from txbroker.testing.broker_thread import BrokerThread

__all__ = ["BrokerThread"]
