import os
import unittest

import pytest
from hypothesis import settings

from tests.helpers import BrokerProcess

# Hypothesis in `make test` is reproducible: every property and stateful model draws
# from a seed derived from the test's name (derandomize) and no example database is
# read or written, so a fresh clone and a developer's checkout run the same examples
# and a result never depends on luck or on a local .hypothesis folder. The deeper
# random search under fresh seeds is `make model-check` (tests/model_check.py), which
# loads the "model-check" profile and scales the stateful models' examples.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("model-check", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("TXBROKER_HYPOTHESIS_PROFILE", "ci"))
MODEL_CHECK_SCALE = int(os.environ.get("TXBROKER_MODEL_CHECK_SCALE", "1"))


def _is_state_machine_test(cls: type | None) -> bool:
    return (cls is not None and issubclass(cls, unittest.TestCase)
            and isinstance(getattr(cls, "settings", None), settings)
            and cls.__module__ == "hypothesis.stateful")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every hypothesis stateful model ``model`` (make model-check runs them) and
    scale its examples in a model-check run."""
    for item in items:
        cls = getattr(item, "cls", None)
        if not _is_state_machine_test(cls):
            continue
        item.add_marker(pytest.mark.model)
        if MODEL_CHECK_SCALE > 1 and not getattr(cls, "_txbroker_scaled", False):
            cls.settings = settings(cls.settings,
                                    max_examples=cls.settings.max_examples * MODEL_CHECK_SCALE)
            cls._txbroker_scaled = True


@pytest.fixture
def broker_process(tmp_path):
    """A broker as a real OS process (python -m txbroker serve) on an ephemeral port,
    with its admin endpoint on (loopback): ``broker_process.faults`` installs faults."""
    proc = BrokerProcess(str(tmp_path / "data"), {"admin.http.port": "0"})
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()
