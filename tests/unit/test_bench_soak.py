"""bench.soak's pure parts: the verdicts from samples, the log tally, the PNG writer (no broker)."""

import struct
import zlib

from bench.soak import output, png, sample, verdict


def _samples(rss, fds=None, tasks=None, produced=None, step=60.0, **extra):
    n = len(rss)
    fds = fds or [100] * n
    tasks = tasks or [50] * n
    produced = produced or [1000.0] * n
    return [{"t": i * step, "rss_mb": rss[i], "fds": fds[i], "tasks": tasks[i],
             "produced_per_s": produced[i], "consumed_per_s": 2000.0, "txn_per_s": 100.0,
             "errors": 0, "violations": 0, **extra} for i in range(n)]


def _by_name(verdicts):
    return {v.name: v for v in verdicts}


def test_slope_is_least_squares():
    assert verdict.slope([0, 1, 2, 3], [1, 3, 5, 7]) == 2.0
    assert verdict.slope([0, 1, 2], [5, 5, 5]) == 0.0
    assert verdict.slope([1], [1]) == 0.0


def test_a_flat_run_passes_every_goal():
    rss = [60, 90, 100, 101, 99, 100, 101, 100, 99, 100, 101]  # warm-up, then noise
    got = verdict.compute(_samples(rss), warmup_s=120)
    assert all(v.ok for v in got), [v for v in got if not v.ok]


def test_a_steady_rss_climb_after_warm_up_fails_flatness_not_the_ceiling():
    rss = [100 + 2 * i for i in range(31)]  # +2 MB a minute: 56 MB over the window
    v = _by_name(verdict.compute(_samples(rss), warmup_s=120))
    assert v["RSS flat"].ok is False
    assert v["RSS max after the warm-up"].ok is True


def test_rss_over_256_mb_fails_the_ceiling():
    v = _by_name(verdict.compute(_samples([250, 260, 260, 260, 260]), warmup_s=60))
    assert v["RSS max after the warm-up"].ok is False
    assert v["RSS flat"].ok is True


def test_rise_within_the_relative_tolerance_is_flat():
    # fds 200 -> 215: 15 more, under 10% of the mean (~207), over the absolute 4.
    fds = [200 + i for i in range(16)]
    v = _by_name(verdict.compute(_samples([100] * 16, fds=fds), warmup_s=0))
    assert v["open file descriptors flat"].ok is True
    tasks = [50 + 2 * i for i in range(16)]  # +30 over a mean of 65: a leak
    v = _by_name(verdict.compute(_samples([100] * 16, tasks=tasks), warmup_s=0))
    assert v["event-loop tasks flat"].ok is False


def test_throughput_compares_the_last_third_with_the_first():
    produced = [1000.0] * 3 + [950.0] * 3 + [800.0] * 3
    v = _by_name(verdict.compute(_samples([100] * 9, produced=produced), warmup_s=0))
    assert v["throughput flat: produced"].ok is False
    assert "0.80x" in v["throughput flat: produced"].value
    assert verdict.thirds([1, 2, 3, 4, 5, 6, 7]) == ([1, 2], [6, 7])
    assert verdict.thirds([1, 2]) == ([], [])


def test_error_lines_and_violations_fail_and_too_few_samples_is_not_judged():
    v = _by_name(verdict.compute(_samples([100, 100]), warmup_s=0, error_lines=2,
                                 violations=1))
    assert v["ERROR lines in the broker log"].ok is False
    assert v["aborted records seen by read_committed consumers"].ok is False
    assert v["RSS flat"].ok is None and v["throughput flat: produced"].ok is None
    assert v["RSS flat"].mark == "n/a"


def test_log_tally_counts_levels_once_and_keeps_error_lines():
    lines = ["2026-01-01 10:00:00,001 INFO txbroker: ready\n",
             "2026-01-01 10:00:01,002 ERROR txbroker.x: boom\n",
             "Traceback (most recent call last):\n",
             "2026-01-01 10:00:02,003 WARNING txbroker.y: slow\n"]
    tally = sample.LogTally()
    tally.update(lines[:2])
    tally.update(lines)
    assert (tally.lines, tally.errors, tally.warnings, tally.tracebacks) == (4, 1, 1, 1)
    assert tally.bytes == sum(len(x) for x in lines)
    assert tally.error_lines == ["2026-01-01 10:00:01,002 ERROR txbroker.x: boom"]


def test_rates_between_samples_and_metrics_parsing():
    samples = [{"t": 0.0, "produced": 0, "consumed": 0, "txns": 0, "log_lines": 0, "cpu_s": 1.0},
               {"t": 10.0, "produced": 500, "consumed": 1000, "txns": 20, "log_lines": 5,
                "cpu_s": 6.0}]
    sample.add_rates(samples)
    assert "produced_per_s" not in samples[0]
    assert samples[1]["produced_per_s"] == 50.0 and samples[1]["txn_per_s"] == 2.0
    assert samples[1]["cpu_pct"] == 50.0
    text = ("# TYPE txbroker_event_loop_tasks gauge\ntxbroker_event_loop_tasks 42\n"
            'txbroker_groups{protocol="classic",state="Stable"} 1\n')
    parsed = sample.parse_metrics(text)
    assert parsed["txbroker_event_loop_tasks"] == 42.0
    assert parsed['txbroker_groups{protocol="classic",state="Stable"}'] == 1.0


def _chunks(data: bytes):
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        yield kind, body
        pos += 12 + length


def test_png_writer_makes_a_valid_png():
    data = png.encode_png(3, 2, bytes([0, 1, 2, 3, 4, 5]))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks = list(_chunks(data))
    assert [k for k, _ in chunks] == [b"IHDR", b"PLTE", b"IDAT", b"IEND"]
    assert struct.unpack(">IIBBBBB", chunks[0][1]) == (3, 2, 8, 3, 0, 0, 0)
    assert len(chunks[1][1]) == 3 * len(png.PALETTE)
    raw = zlib.decompress(chunks[2][1])
    assert raw == b"\x00\x00\x01\x02\x00\x03\x04\x05"  # filter byte 0, then the row


def test_the_soak_plot_is_a_small_png_of_the_right_size():
    samples = _samples([50 + i for i in range(31)], connections=20, cpu_pct=40.0)
    data = output.plot(samples, warmup_s=300)
    chunks = dict(_chunks(data))
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    assert (width, height) == (760, 5 * 150 + 10)
    assert len(data) < 100_000
    pixels = zlib.decompress(chunks[b"IDAT"])
    assert len(pixels) == height * (width + 1)
    assert len(set(pixels)) > 3  # something drawn besides white


def test_canvas_draws_lines_and_text_inside_its_bounds():
    c = png.Canvas(40, 20)
    c.line(-5, -5, 50, 30, png.BLACK)  # clipped, no IndexError
    c.line(0, 10, 39, 10, png.RED, dash=2)
    assert c.pixels[10 * 40 + 0] == png.RED and c.pixels[10 * 40 + 2] == png.WHITE
    end = c.text(0, 0, "Ab1%")
    assert end == 4 * png.GLYPH_W
    assert png.x_step(30) == 5 and png.x_step(3) == 0.5
