import pytest

from tests.helpers import BrokerProcess


@pytest.fixture
def broker_process(tmp_path):
    """A broker as a real OS process (python -m txbroker serve) on an ephemeral port."""
    proc = BrokerProcess(str(tmp_path / "data"))
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()
