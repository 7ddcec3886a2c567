"""The live page the `--metrics` endpoint serves at `/` (oppsched/run/live.py;
docs/howto/watch-a-run.md): it polls `/live.json` every second and draws, per run, the
users' MAC throughput and AP queue, the flows' goodput and windows (the sender's cwnd, the
window CLAMP advertised), the late slots, and a sweep's progress, with Chart.js served
from the same endpoint (`/chart.js`: Debian's libjs-chart.js; nothing from the internet).

The series start when the page is opened (the endpoint keeps no history: Prometheus does).
`window.oppschedLive` holds what the page has drawn (polls, points per chart), for tests."""

CHART_JS = "/usr/share/javascript/chart.js/chart.min.js"

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>oppsched: live</title>
<style>
 body { font-family: sans-serif; margin: 1em; color: #222; }
 h1 { font-size: 1.3em; margin: 0 0 .3em 0; }
 #status, #sweep { margin: .2em 0; }
 .grid { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
 .panel { border: 1px solid #ccc; padding: .5em; height: 280px; }
 .late { color: #b00; font-weight: bold; }
 select { font-size: 1em; }
</style>
<script src="chart.js"></script>
</head>
<body>
<h1>oppsched: live <select id="run"></select></h1>
<div id="status">waiting for a run...</div>
<div id="sweep"></div>
<div class="grid">
 <div class="panel"><canvas id="throughput"></canvas></div>
 <div class="panel"><canvas id="goodput"></canvas></div>
 <div class="panel"><canvas id="queue"></canvas></div>
 <div class="panel"><canvas id="window"></canvas></div>
</div>
<script>
"use strict";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const state = { polls: 0, errors: 0, runs: {}, points: {}, chosen: false };
window.oppschedLive = state;
const charts = {};
function chart(id, title, ylabel) {
  charts[id] = new Chart(document.getElementById(id), {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
      elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
      scales: { x: { type: "linear", title: { display: true, text: "s after t0" } },
                y: { beginAtZero: true, title: { display: true, text: ylabel } } },
      plugins: { title: { display: true, text: title } } } });
}
chart("throughput", "MAC throughput per user", "kb/s");
chart("goodput", "goodput per flow", "kb/s");
chart("queue", "AP queue per user", "bytes");
chart("window", "windows per flow (cwnd, CLAMP's advertised window)", "bytes");
function series(run, id, name) {
  const per = state.runs[run] = state.runs[run] || {};
  const c = per[id] = per[id] || {};
  return c[name] = c[name] || [];
}
function add(run, id, name, x, y) {
  if (y === null || y === undefined || x === null) return;
  const s = series(run, id, name);
  if (s.length && s[s.length - 1].x === x) s[s.length - 1].y = y; else s.push({ x: x, y: y });
}
function draw(run) {
  for (const id in charts) {
    const per = (state.runs[run] || {})[id] || {};
    const names = Object.keys(per).sort();
    charts[id].data.datasets = names.map((n, i) => ({
      label: n, data: per[n], borderColor: COLORS[i % COLORS.length],
      backgroundColor: COLORS[i % COLORS.length],
      borderDash: n.endsWith("CLAMP") ? [5, 3] : [] }));
    charts[id].update("none");
    state.points[id] = names.reduce((a, n) => a + per[n].length, 0);
  }
}
function hms(s) {
  if (s === null || s === undefined) return "?";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(r).padStart(2, "0");
}
const sel = document.getElementById("run");
async function poll() {
  try {
    const r = await fetch("live.json", { cache: "no-store" });
    const snap = await r.json();
    state.polls += 1;
    const labels = snap.runs.map(x => x.run);
    if (labels.join("\n") !== Array.from(sel.options).map(o => o.value).join("\n")) {
      const keep = sel.value;
      sel.innerHTML = "";
      for (const l of labels) { const o = document.createElement("option"); o.value = o.text = l; sel.add(o); }
      const running = snap.runs.find(x => x.status === "running");
      sel.value = labels.includes(keep) ? keep : (running ? running.run : labels[0] || "");
    }
    // follow the run going on (the next variant, the next point) until a run is chosen
    const now = snap.runs.find(x => x.status === "running");
    if (!state.chosen && now && now.run !== sel.value) sel.value = now.run;
    for (const run of snap.runs) {
      const x = run.elapsed_s;
      if (x === null) continue;
      for (const [u, d] of Object.entries(run.users)) {
        add(run.run, "throughput", u, x, d.throughput_bps / 1e3);
        add(run.run, "queue", u, x, d.queue_bytes);
      }
      for (const [f, d] of Object.entries(run.flows)) {
        add(run.run, "goodput", f, x, d.goodput_bps === null ? null : d.goodput_bps / 1e3);
        add(run.run, "window", f + " cwnd", x, d.cwnd_bytes);
        add(run.run, "window", f + " CLAMP", x, d.clamp_window_bytes);
      }
    }
    const cur = snap.runs.find(x => x.run === sel.value);
    const st = document.getElementById("status");
    if (cur) {
      st.innerHTML = "run <b>" + cur.run + "</b> (" + cur.experiment + (cur.variant ? ", " + cur.variant : "") +
        "): " + cur.status + (cur.elapsed_s !== null ? ", " + cur.elapsed_s.toFixed(0) + " of " + cur.duration_s + " s" : "") +
        "; " + cur.slots + " slots, <span class='" + (cur.late_slots ? "late" : "") + "'>" + cur.late_slots + " late</span>";
    } else {
      st.textContent = "no run going on";
    }
    const sw = snap.sweep;
    document.getElementById("sweep").textContent = sw ?
      "sweep: " + sw.done + " points done, " + sw.remaining + " remaining" +
      (sw.failed ? ", " + sw.failed + " failed" : "") + ", time left about " + hms(sw.seconds_left) : "";
    draw(sel.value);
  } catch (e) {
    state.errors += 1;
    document.getElementById("status").textContent = "endpoint unreachable (" + e + ")";
  }
}
sel.addEventListener("change", () => { state.chosen = true; draw(sel.value); });
poll();
setInterval(poll, 1000);
</script>
</body>
</html>
"""
