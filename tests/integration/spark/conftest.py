import pytest

from tests.integration.spark_util import shared_spark


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession shared by every Spark test (start-up costs seconds)."""
    session = shared_spark()
    yield session
    session.stop()
