"""broker/features.py: the finalized feature levels and their file in the data dir."""

from __future__ import annotations

import json

import pytest
from txbroker.broker.features import FEATURES_FILE, TRANSACTION_VERSION, FinalizedFeatures


def test_configured_level_until_an_update_then_the_stored_one(tmp_path):
    f = FinalizedFeatures(str(tmp_path), 2)
    assert f.level(TRANSACTION_VERSION) == 2 and not (tmp_path / FEATURES_FILE).exists()
    epoch = f.epoch
    f.finalize({TRANSACTION_VERSION: 1})
    assert f.level(TRANSACTION_VERSION) == 1 and f.epoch > epoch
    assert json.loads((tmp_path / FEATURES_FILE).read_text()) == {
        "version": 1, "levels": {"group.version": 1, TRANSACTION_VERSION: 1}}
    # A later start: the stored level wins over the configured one, whatever it is.
    for configured in (0, 2):
        assert FinalizedFeatures(str(tmp_path), configured).level(TRANSACTION_VERSION) == 1


@pytest.mark.parametrize("content", [
    "{", "[]", '{"version": 2, "levels": {}}', '{"version": 1, "levels": []}',
    '{"version": 1, "levels": {"transaction.version": "1"}}',
    '{"version": 1, "levels": {"transaction.version": 3}}',
    '{"version": 1, "levels": {"transaction.version": -1}}',
])
def test_an_unreadable_or_impossible_file_stops_the_start(tmp_path, content):
    (tmp_path / FEATURES_FILE).write_text(content)
    with pytest.raises(ValueError, match=FEATURES_FILE):
        FinalizedFeatures(str(tmp_path), 2)
