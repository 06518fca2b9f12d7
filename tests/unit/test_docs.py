"""Docs stay true: the configuration reference lists every key the code knows."""

from pathlib import Path

from txbroker.broker.config import BROKER_KEYS, markdown_reference
from txbroker.broker.handlers import supported_versions
from txbroker.protocol.messages import api_name
from txbroker.storage.log_config import TOPIC_CONFIGS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_configuration_reference_is_current():
    text = (DOCS / "configuration.md").read_text()
    assert markdown_reference() in text, (
        "docs/configuration.md is stale: regenerate the key tables with "
        "`make docs-config`"
    )
    for key in list(BROKER_KEYS) + list(TOPIC_CONFIGS):
        assert f"`{key}`" in text


def test_compatibility_lists_every_advertised_api():
    text = (DOCS / "compatibility.md").read_text()
    for api_key, low, high in supported_versions():
        name = "".join(part.capitalize() for part in api_name(api_key).split("_"))
        row = [line for line in text.splitlines() if line.startswith(f"| {name} | {api_key} |")]
        assert row, f"{name} missing from docs/compatibility.md"
        assert f"{low}-{high}" in row[0], f"{name} versions {low}-{high} not in: {row[0]}"
