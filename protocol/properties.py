"""Java-style properties files (``key=value`` or ``key: value``, ``#`` and ``!``
comments): Kafka's server.properties for the broker (broker/config.py) and client
properties for the tools' ``--command-config`` (tools/transactions.py)."""

from __future__ import annotations


def parse_properties_lines(text: str) -> list[tuple[str, str, int]]:
    """Java-style properties as (key, value, line number): key=value or key: value,
    # and ! comments."""
    out: list[tuple[str, str, int]] = []
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                out.append((key.strip(), value.strip(), lineno))
                break
        else:
            out.append((line, "", lineno))
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Java-style properties: key=value or key: value, # and ! comments."""
    return {key: value for key, value, _ in parse_properties_lines(text)}
