"""broker/handlers/__init__.py's HANDLER_TABLE (what ApiVersions advertises before any
handler module is imported) must say what the modules themselves say."""

import importlib
import pathlib

from txbroker.broker.handlers import HANDLER_TABLE, HANDLERS, accepts, supported_versions

HANDLER_DIR = pathlib.Path(importlib.import_module("txbroker.broker.handlers").__file__).parent


def _handler_module_names() -> set[str]:
    return {p.stem for p in HANDLER_DIR.glob("*.py") if not p.stem.startswith("_")}


def test_every_handler_module_is_in_the_table_with_its_own_versions():
    names = _handler_module_names()
    assert {entry[0] for entry in HANDLER_TABLE.values()} == names
    for api_key, (name, low, high, parsed_low) in HANDLER_TABLE.items():
        module = importlib.import_module(f"txbroker.broker.handlers.{name}")
        assert module.API_KEY == api_key, name
        assert (module.MIN_VERSION, module.MAX_VERSION) == (low, high), name
        assert getattr(module, "MIN_PARSED_VERSION", module.MIN_VERSION) == parsed_low, name
        assert HANDLERS[api_key] is module


def test_lookups_answer_from_the_table():
    assert 99 not in HANDLERS and 0 in HANDLERS
    assert len(HANDLERS) == len(HANDLER_TABLE) == len(supported_versions())
    assert not accepts(0, 2) and accepts(0, 3)  # Produce v0-2 advertised, refused
    assert not accepts(99, 0)
