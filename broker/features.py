"""Finalized feature levels (KIP-584): what ApiVersions advertises and UpdateFeatures
changes. txbroker has two features, Kafka's ``transaction.version`` (0-2) and
``group.version`` (0-1: level 1 enables the consumer group protocol of KIP-848,
ConsumerGroupHeartbeat and ConsumerGroupDescribe; finalized at 1 as Kafka 4.3.1 does on
a new cluster), and ``share.version`` (0-2: level 1 enables share groups of KIP-932,
ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge, which are
advertised only then; level 2, as in Kafka 4.4, also their dead-letter topics of
KIP-1191; finalized at 2 by default, as a new Kafka 4.4 cluster does), and
``streams.version`` (0-1: level 1 enables the streams group protocol of KIP-1071,
StreamsGroupHeartbeat and StreamsGroupDescribe; finalized at 1 by default, as a new
Kafka 4.4 cluster does).

Kafka keeps the finalized levels in its metadata log: ``kafka-storage format
--feature transaction.version=N`` writes the first level, and UpdateFeatures
(``kafka-features upgrade/downgrade/disable``) later ones, which survive restarts and
are not affected by the format options any more. Here the config key
``txbroker.transaction.version`` (and ``txbroker.share.version``,
``txbroker.streams.version``) plays the part of
the format option: it is the level
until an UpdateFeatures changes it; from then on the level stored in the data
directory (``finalized-features.json``, written durably) wins over the config key.
"""

from __future__ import annotations

import json
import logging
import os
import time

from txbroker.storage.durable_file import write_durably

log = logging.getLogger(__name__)

FEATURES_FILE = "finalized-features.json"
TRANSACTION_VERSION = "transaction.version"  # Kafka's feature name
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"
# Supported levels per feature (Kafka 4.4's ranges).
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2), GROUP_VERSION: (0, 1),
                                         SHARE_VERSION: (0, 2), STREAMS_VERSION: (0, 1)}


class FinalizedFeatures:
    """The finalized levels, their epoch (ApiVersions' finalized_features_epoch) and
    where they are stored."""

    def __init__(self, data_dir: str, transaction_version: int, share_version: int = 0,
                 streams_version: int = 0) -> None:
        self.path = os.path.join(data_dir, FEATURES_FILE)
        self.levels: dict[str, int] = {TRANSACTION_VERSION: transaction_version,
                                        GROUP_VERSION: 1}
        if share_version:  # level 0 is off: not listed (nor stored) at all
            self.levels[SHARE_VERSION] = share_version
        if streams_version:
            self.levels[STREAMS_VERSION] = streams_version
        # Clients keep the finalized features of the highest epoch they saw: the start
        # time (ms) orders the levels of this broker's incarnations, and every update
        # takes a larger one.
        self.epoch = int(time.time() * 1000)
        stored = self._load()
        if stored is not None:
            for name, level in stored.items():
                if name not in SUPPORTED:
                    continue  # UpdateFeatures stores only features it knows
                lo, hi = SUPPORTED[name]
                if not lo <= level <= hi:
                    raise ValueError(f"finalized feature {name}={level} in {self.path} is "
                                     f"outside the supported levels {lo}-{hi}")
                if level != self.levels.get(name):
                    log.info("finalized feature %s=%d from %s (set by UpdateFeatures) overrides "
                             "the configured level %d", name, level, self.path,
                             self.levels.get(name, 0))
                self.levels[name] = level

    def _load(self) -> dict[str, int] | None:
        try:
            with open(self.path) as f:
                raw = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the finalized features in {self.path}: {e}") from e
        levels = raw.get("levels") if isinstance(raw, dict) else None
        if not isinstance(levels, dict) or raw.get("version") != 1 or not all(
                isinstance(k, str) and type(v) is int and 0 <= v < 2**15
                for k, v in levels.items()):
            raise ValueError(f"cannot read the finalized features in {self.path}: "
                             f"unexpected content {raw!r}")
        return levels

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def finalize(self, updates: dict[str, int]) -> None:
        """Store the new levels durably, then serve them (a failed write raises and
        changes nothing)."""
        levels = dict(self.levels)
        levels.update(updates)
        payload = {"version": 1, "levels": dict(sorted(levels.items()))}
        write_durably(self.path, (json.dumps(payload, indent=1) + "\n").encode())
        self.levels = levels
        self.epoch = max(self.epoch + 1, int(time.time() * 1000))
        for name, level in updates.items():
            log.info("finalized feature %s is now at level %d (epoch %d)", name, level,
                     self.epoch)
