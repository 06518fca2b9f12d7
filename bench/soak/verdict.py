"""The soak's verdicts from its samples: pure functions over plain dicts (no broker).

Goals (docs/testing.md, "The soak"): after the warm-up, RSS flat and at most
256 MB; open file descriptors and event-loop tasks flat; no ERROR line in the
broker's log; no aborted record seen by a read_committed consumer; throughput flat
(the last third of the samples after the warm-up against the first third).

"Flat" is the least-squares line through the samples after the warm-up: its rise
over that window must stay within a tolerance (absolute, or relative to the mean,
whichever is larger). A leak rises steadily; noise does not fit a line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

RSS_LIMIT_MB = 256.0


@dataclass(frozen=True)
class Tolerances:
    rss_rise_mb: float = 8.0         # or 5% of the mean, whichever is larger
    rss_rise_fraction: float = 0.05
    fds_rise: float = 4.0            # or 10% of the mean
    fds_rise_fraction: float = 0.10
    tasks_rise: float = 4.0          # or 10% of the mean
    tasks_rise_fraction: float = 0.10
    throughput_min_ratio: float = 0.9  # last third / first third


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def after_warmup(samples: Sequence[dict[str, Any]], warmup_s: float) -> list[dict[str, Any]]:
    return [s for s in samples if s["t"] >= warmup_s]


def thirds(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The first and last third (at least one value each; both empty under 3 values)."""
    if len(values) < 3:
        return [], []
    k = len(values) // 3
    return list(values[:k]), list(values[-k:])


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass
class Verdict:
    name: str
    value: str
    goal: str
    ok: bool | None  # None: not enough samples to judge

    @property
    def mark(self) -> str:
        return {True: "pass", False: "**FAIL**", None: "n/a"}[self.ok]


def flat(name: str, samples: Sequence[dict[str, Any]], key: str, unit: str,
         rise_abs: float, rise_fraction: float) -> Verdict:
    """The fitted rise of ``key`` over the samples (already after the warm-up)."""
    points = [(s["t"], s[key]) for s in samples if s.get(key) is not None]
    if len(points) < 3:
        return Verdict(name, "too few samples after the warm-up", "flat", None)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    window = xs[-1] - xs[0]
    rise = slope(xs, ys) * window
    allowed = max(rise_abs, rise_fraction * _mean(ys))
    per_hour = slope(xs, ys) * 3600
    return Verdict(name, f"{rise:+.1f} {unit} over {window / 60:.1f} min "
                   f"({per_hour:+.1f} {unit}/h; {min(ys):g}..{max(ys):g})",
                   f"rise ≤ {allowed:.1f} {unit}", rise <= allowed)


def throughput(name: str, samples: Sequence[dict[str, Any]], key: str,
               min_ratio: float) -> Verdict:
    values = [s[key] for s in samples if s.get(key) is not None]
    first, last = thirds(values)
    if not first or _mean(first) == 0:
        return Verdict(name, "too few samples after the warm-up", f"≥ {min_ratio:g}x", None)
    ratio = _mean(last) / _mean(first)
    return Verdict(name, f"{_mean(first):.1f} → {_mean(last):.1f}/s ({ratio:.2f}x)",
                   f"last third ≥ {min_ratio:g}x the first", ratio >= min_ratio)


def compute(samples: Sequence[dict[str, Any]], warmup_s: float,
            tol: Tolerances = Tolerances(), *, error_lines: int | None = None,
            violations: int | None = None) -> list[Verdict]:
    """Every goal's verdict. ``error_lines``/``violations``: the run's totals (default:
    the last sample's ``errors``/``violations``, which miss what came after it)."""
    steady = after_warmup(samples, warmup_s)
    last = samples[-1] if samples else {}
    errors = last.get("errors", 0) if error_lines is None else error_lines
    bad = last.get("violations", 0) if violations is None else violations
    rss = [s["rss_mb"] for s in steady if s.get("rss_mb") is not None]
    rss_all = [s["rss_mb"] for s in samples if s.get("rss_mb") is not None]
    out = [
        Verdict("RSS max after the warm-up",
                f"{max(rss):.1f} MB (whole run {max(rss_all):.1f})" if rss else "no samples",
                f"≤ {RSS_LIMIT_MB:.0f} MB", (max(rss) <= RSS_LIMIT_MB) if rss else None),
        flat("RSS flat", steady, "rss_mb", "MB", tol.rss_rise_mb, tol.rss_rise_fraction),
        flat("open file descriptors flat", steady, "fds", "fds", tol.fds_rise,
             tol.fds_rise_fraction),
        flat("event-loop tasks flat", steady, "tasks", "tasks", tol.tasks_rise,
             tol.tasks_rise_fraction),
        Verdict("ERROR lines in the broker log", str(errors), "0", errors == 0),
        Verdict("aborted records seen by read_committed consumers", str(bad), "0", bad == 0),
    ]
    for key, label in (("produced_per_s", "produced"), ("consumed_per_s", "consumed"),
                       ("txn_per_s", "transactions")):
        out.append(throughput(f"throughput flat: {label}", steady, key,
                              tol.throughput_min_ratio))
    return out


def as_dicts(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    return [asdict(v) for v in verdicts]
