import pytest

from .clients import unique_topic


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test uses."""
    return unique_topic(request.node.name)

