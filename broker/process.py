"""Moved to ``txbroker.testing`` (testing/broker_process.py); kept for existing imports:
``from txbroker.broker.process import BrokerProcess`` still works. New code:
``from txbroker.testing import BrokerProcess``. (An alias: tests/unit/test_layers.py
allows it this one import against the layers, and no product module may import it.)"""

from txbroker.testing.broker_process import LISTENER, READY, BrokerProcess

__all__ = ["LISTENER", "READY", "BrokerProcess"]
