// txbroker console: live charts on the overview (inline SVG drawn here, no library).
// Polls /console/api/rates (cumulative counters) each second while the page is visible;
// rates and percentiles come from the differences between two polls.
"use strict";
(function () {
  const root = document.getElementById("charts");
  if (!root) return;
  const POLL_MS = 1000, POINTS = 120, W = 310, H = 90;
  const NS = "http://www.w3.org/2000/svg";
  const charts = [
    { id: "produce", title: "Produce bytes/s", unit: "B/s", lines: ["produce"] },
    { id: "fetch", title: "Fetch bytes/s", unit: "B/s", lines: ["fetch"] },
    { id: "txn", title: "Transactions/s (committed, aborted)", unit: "/s",
      lines: ["committed", "aborted"] },
    { id: "commit", title: "EndTxn latency p99", unit: "ms", lines: ["commit_p99"] },
    { id: "fsync", title: "fsync round latency p99", unit: "ms", lines: ["fsync_p99"] },
  ];
  const colors = ["#1f5fae", "#b3261e"];
  const series = {};
  let last = null;

  function el(name, attrs) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  for (const c of charts) {
    const box = document.createElement("div");
    box.className = "chart";
    box.id = "chart-" + c.id;
    const h = document.createElement("h3");
    h.textContent = c.title;
    const now = document.createElement("div");
    now.className = "now";
    const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    box.append(h, svg, now);
    root.append(box);
    c.svg = svg; c.now = now;
    for (const l of c.lines) series[l] = [];
  }

  function p99(bounds, before, after) {
    const d = after.map((n, i) => n - (before[i] || 0));
    const total = d.reduce((a, b) => a + b, 0);
    if (total <= 0) return null;
    let run = 0;
    for (let i = 0; i < d.length; i++) {
      run += d[i];
      if (run >= 0.99 * total) return i < bounds.length ? bounds[i] * 1000 : bounds[bounds.length - 1] * 1000;
    }
    return null;
  }
  function human(v, unit) {
    if (v === null || v === undefined) return "-";
    if (unit === "B/s") {
      const u = ["B/s", "KiB/s", "MiB/s", "GiB/s"];
      let i = 0;
      while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
      return v.toFixed(i ? 1 : 0) + " " + u[i];
    }
    return (v < 10 ? v.toFixed(2) : v.toFixed(0)) + " " + unit;
  }
  function draw(c) {
    while (c.svg.firstChild) c.svg.removeChild(c.svg.firstChild);
    let max = 0;
    for (const l of c.lines) for (const v of series[l]) if (v !== null && v > max) max = v;
    max = max || 1;
    c.svg.append(el("line", { x1: 0, y1: H - 1, x2: W, y2: H - 1, stroke: "#d8dde2" }));
    c.lines.forEach((l, i) => {
      // The newest point at the right edge; the window widens from 30 samples to
      // POINTS as they come, then scrolls left.
      const n = series[l].length, span = Math.min(POINTS, Math.max(n, 30)) - 1;
      const pts = series[l].map((v, j) => v === null ? null :
        `${(W - W * (n - 1 - j) / span).toFixed(1)},${(H - 2 - (H - 6) * v / max).toFixed(1)}`)
        .filter(p => p !== null).join(" ");
      if (pts) c.svg.append(el("polyline", { points: pts, fill: "none", stroke: colors[i],
                                              "stroke-width": 1.5, class: "line-" + l }));
    });
    c.now.textContent = c.lines.map(l => human(series[l][series[l].length - 1], c.unit))
      .join(" / ") + "  (max " + human(max, c.unit) + ")";
  }
  function push(name, v) {
    const s = series[name];
    s.push(v);
    if (s.length > POINTS) s.shift();
  }
  async function poll() {
    if (document.visibilityState === "visible") {
      try {
        const r = await fetch(root.dataset.source, { credentials: "same-origin" });
        const cur = await r.json();
        if (last) {
          const dt = Math.max(cur.time - last.time, 0.001);
          push("produce", (cur.produce_bytes - last.produce_bytes) / dt);
          push("fetch", (cur.fetch_bytes - last.fetch_bytes) / dt);
          push("committed", (cur.committed - last.committed) / dt);
          push("aborted", (cur.aborted - last.aborted) / dt);
          push("commit_p99", p99(cur.end_txn.bounds, last.end_txn.counts, cur.end_txn.counts));
          push("fsync_p99", p99(cur.fsync.bounds, last.fsync.counts, cur.fsync.counts));
          charts.forEach(draw);
          root.dataset.samples = String(series.produce.length);
        }
        last = cur;
      } catch (e) {
        root.dataset.error = String(e);
      }
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
