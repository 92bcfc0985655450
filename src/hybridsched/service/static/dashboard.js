// The live dashboard: one WebSocket for events, REST for controls and the Gantt window.
// Every chart marks its canvas data-drawn="1" once it has drawn data (the browser test reads it).
"use strict";
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563"];
const $ = (id) => document.getElementById(id);
const tokenBox = $("token");
tokenBox.value = sessionStorage.getItem("hybridsched-token") || "";
tokenBox.addEventListener("change", () => sessionStorage.setItem("hybridsched-token", tokenBox.value));

let policies = [];
let nDevices = 5;
const utilHistory = [];  // {t, util: {policy: [per device]}}
// the retrain timeline counts retrains per policy in time bins from 0 s: a row keeps at most
// RETRAIN_BINS dots (dot size: retrains in the bin), and the bins double in width whenever the
// run outgrows them, so a long run stays readable
const RETRAIN_BINS = 48;
let retrainBin = 1;                // bin width, simulated s
const retrainCounts = new Map();   // policy -> Map(bin index -> retrains)
const LIVE = new Set(["running", "paused"]);  // states with a race in memory (Gantt, Pause/Resume/Stop)
let raceState = "unknown";         // the latest status's state
let startPending = false;          // a Start or Continue request is on its way
const WINDOW_S = 60;     // the utilisation and Gantt window (simulated s), as the server's stats.WINDOW_S
let lastRate = null;     // tasks/s from the latest status or update: the header keeps it while running
const mark = (chart) => { chart.canvas.dataset.drawn = "1"; };
// log axes: label only 1, 2, 5 x 10^k (or only 10^k over many decades) so labels never overlap
function logTicks(value, index, ticks) {
  const lo = ticks[0] ? ticks[0].value : value, hi = ticks.length ? ticks[ticks.length - 1].value : value;
  const decades = Math.log10(Math.max(hi, 1e-12) / Math.max(lo, 1e-12));
  // the mantissa itself, not rounded: an empty axis (1 to 10) has ticks at 1.1, 1.2, ... that
  // would round to 1 and crowd the labels
  const mant = value / Math.pow(10, Math.floor(Math.log10(value) + 1e-9));
  const is = (m) => Math.abs(mant - m) < 1e-6 * m;
  const keep = decades > 3 ? is(1) || is(10) : [1, 2, 5, 10].some(is);
  return keep ? Number(value.toPrecision(3)).toLocaleString("en-US", { maximumSignificantDigits: 3 }) : "";
}
const LOG_TICKS = { autoSkip: true, autoSkipPadding: 8, maxRotation: 0, callback: logTicks };
// a retrain dot's radius: its area grows with the bin's count, and the largest dot stays within
// its bin's width, so dots of one row never overlap
function retrainRadius(ctx) {
  const area = ctx.chart.chartArea;
  const room = area ? (area.right - area.left) / RETRAIN_BINS / 2 - 0.5 : 4;
  const rMax = Math.max(1.5, Math.min(6, room));
  const top = ctx.chart.$retrainTop || 1;
  const n = ctx.raw ? ctx.raw.n : 1;
  return Math.min(rMax, 1 + (rMax - 1) * Math.sqrt(n / top));
}
const drawnPlugin = { id: "drawn", afterDraw(chart) { if (chart.$hasData) mark(chart); } };
Chart.register(drawnPlugin);
Chart.defaults.animation = false;
Chart.defaults.maintainAspectRatio = false;

const charts = {
  race: new Chart($("chart-race"), { type: "bar", data: { labels: [], datasets: [{ label: "mean latency (s)", data: [], backgroundColor: COLORS }] },
    options: { plugins: { legend: { display: false } },
      scales: { x: { ticks: { autoSkip: false, maxRotation: 30 } },
                y: { type: "logarithmic", title: { display: true, text: "s" }, ticks: LOG_TICKS } } } }),
  cdf: new Chart($("chart-cdf"), { type: "line", data: { datasets: [] },
    options: { parsing: false, scales: { x: { type: "logarithmic", title: { display: true, text: "latency (s)" }, ticks: LOG_TICKS },
                                         y: { min: 0, max: 1, ticks: { stepSize: 0.2 } } } } }),
  util: new Chart($("chart-util"), { type: "line", data: { datasets: [] },
    options: { parsing: false, scales: { x: { type: "linear", title: { display: true, text: "sim time (s)" },
                                              ticks: { maxRotation: 0, autoSkipPadding: 12 } }, y: { min: 0, max: 1 } } } }),
  retrain: new Chart($("chart-retrain"), { type: "scatter", data: { datasets: [{ label: "retrains", data: [], pointRadius: retrainRadius }] },
    options: { plugins: { legend: { display: false },
                          tooltip: { callbacks: { label: (c) => `${c.raw.policy}: ${c.raw.n} retrain(s) in ${c.raw.lo}–${c.raw.hi} s` } } },
      scales: { x: { type: "linear", min: 0, title: { display: true, text: "sim time (s)" },
                     ticks: { maxRotation: 0, autoSkipPadding: 12, includeBounds: false } },
                y: { ticks: { stepSize: 1, callback: (v) => policies[v] ?? "" }, min: -1 } } } }),
  gantt: new Chart($("chart-gantt"), { type: "bar", data: { labels: [], datasets: [{ label: "parts", data: [], backgroundColor: [] }] },
    options: { indexAxis: "y", parsing: { xAxisKey: "x", yAxisKey: "y" }, plugins: { legend: { display: false } },
      scales: { x: { type: "linear", title: { display: true, text: "sim time (s)" }, ticks: { maxRotation: 0, autoSkipPadding: 12 } },
                y: { type: "category" } } } }),
};

function setPolicies(list) {
  if (JSON.stringify(list) === JSON.stringify(policies)) return;
  policies = list;
  const sel = $("policy");
  const keep = sel.value;
  sel.innerHTML = "";
  for (const p of list) sel.add(new Option(p, p));
  if (list.includes(keep)) sel.value = keep;
  document.querySelectorAll(".pol").forEach((e) => (e.textContent = sel.value));
}
$("policy").addEventListener("change", () => { document.querySelectorAll(".pol").forEach((e) => (e.textContent = $("policy").value)); drawUtil(); gantt(); });

// one button per thing that can be done in a state: Pause while running, Resume while paused,
// Stop while either, Start otherwise, and Continue run N for a stopped or interrupted run
function showControls(state, resumable, runId) {
  const live = LIVE.has(state);
  $("btn-start").hidden = live;
  $("btn-start").disabled = startPending;
  $("btn-pause").hidden = state !== "running";
  $("btn-resume").hidden = state !== "paused";
  $("btn-stop").hidden = !live;
  const cont = $("btn-continue");
  cont.hidden = live || !resumable;
  cont.textContent = `Continue run ${runId ?? ""}`;
}

function showStatus(s) {
  const st = $("status");
  st.dataset.state = s.state;
  raceState = s.state;
  if (s.tasks_per_s !== undefined && s.tasks_per_s !== null) lastRate = s.tasks_per_s;
  const resumable = s.resumable ? " · resumable" : "";
  // a run's first segment builds the policies' models and compiles the engine's kernels (tens of
  // seconds on a server's first run): the header says so instead of "0 tasks · 0 tasks/s"
  const starting = (startPending && !LIVE.has(s.state)) || (s.state === "running" && s.phase === "starting");
  st.dataset.phase = starting ? "starting" : (s.phase ?? "");
  if (starting) {
    st.textContent = `starting · run ${s.run_id ?? "-"} · loading the policies and compiling the engine (the first run of a server takes tens of seconds)…`;
  } else {
    const rate = s.state === "running" && lastRate !== null ? ` · ${Math.round(lastRate).toLocaleString("en-US")} tasks/s` : "";
    st.textContent = `${s.state} · run ${s.run_id ?? "-"} · ${(s.tasks ?? 0).toLocaleString("en-US")} tasks · sim ${(s.sim_time ?? 0).toFixed(1)} s · speed ${s.speed}${rate}${resumable}`;
  }
  // a run left by a stopped or killed server can be continued (POST start {"resume": true})
  showControls(s.state, s.resumable, s.run_id);
  if (s.state === "interrupted") $("message").textContent = `run ${s.run_id} was interrupted (the server stopped during it); Continue run ${s.run_id} carries it on`;
  if (s.policies && s.policies.length) setPolicies(s.policies);
  if (s.summary && Object.keys(s.summary).length && !window.hybridschedUpdates) drawRace(s.summary);
}

function drawRace(summary) {
  const names = Object.keys(summary);
  const means = names.map((p) => summary[p].mean_latency);
  charts.race.data.labels = names;
  charts.race.data.datasets[0].data = means;
  // a log axis draws a bar from its minimum: put the minimum a decade-step below the smallest
  // mean, so the best policy (often < 1 s) has a visible bar too
  const pos = means.filter((m) => m !== null && m > 0);
  const y = charts.race.options.scales.y;
  if (pos.length) {
    const lo = Math.min(...pos), hi = Math.max(...pos);
    y.min = Math.pow(10, Math.floor(Math.log10(lo * 0.8)));
    y.max = Math.pow(10, Math.ceil(Math.log10(hi * 1.25)));
  }
  charts.race.$hasData = names.some((p) => summary[p].n > 0);
  charts.race.update();
}

function drawCdf(cdf) {
  charts.cdf.data.datasets = Object.keys(cdf).map((p, i) => ({ label: p, borderColor: COLORS[i % COLORS.length], pointRadius: 0,
    data: cdf[p].filter((d) => d[0] > 0).map((d) => ({ x: d[0], y: d[1] })) }));
  charts.cdf.$hasData = charts.cdf.data.datasets.some((d) => d.data.length);
  charts.cdf.update();
}

function drawUtil() {
  const p = $("policy").value;
  if (!p) return;
  const now = utilHistory.length ? utilHistory[utilHistory.length - 1].t : 0;
  charts.util.options.scales.x.min = Math.max(0, now - WINDOW_S);  // the caption's "last 60 sim s"
  charts.util.options.scales.x.max = Math.max(now, WINDOW_S);
  const ds = [];
  for (let d = 0; d < nDevices; d++) {
    ds.push({ label: d === 0 ? "CPU" : `GPU ${d - 1}`, borderColor: COLORS[d % COLORS.length], pointRadius: 0,
      data: utilHistory.filter((h) => h.util[p]).map((h) => ({ x: h.t, y: h.util[p][d] })) });
  }
  charts.util.data.datasets = ds;
  charts.util.$hasData = ds.some((d) => d.data.length);
  charts.util.update();
}

function addRetrain(policy, t) {
  while (t >= RETRAIN_BINS * retrainBin) {  // the run outgrew the bins: merge them in pairs
    retrainBin *= 2;
    for (const [p, bins] of retrainCounts) {
      const merged = new Map();
      for (const [i, n] of bins) merged.set(Math.floor(i / 2), (merged.get(Math.floor(i / 2)) || 0) + n);
      retrainCounts.set(p, merged);
    }
  }
  if (!retrainCounts.has(policy)) retrainCounts.set(policy, new Map());
  const bins = retrainCounts.get(policy), i = Math.floor(Math.max(t, 0) / retrainBin);
  bins.set(i, (bins.get(i) || 0) + 1);
}

function drawRetrains() {
  const pts = [];
  for (const [p, bins] of retrainCounts) {
    const y = Math.max(0, policies.indexOf(p));
    for (const [i, n] of bins) pts.push({ x: (i + 0.5) * retrainBin, y, n, policy: p, lo: i * retrainBin, hi: (i + 1) * retrainBin });
  }
  const c = charts.retrain;
  c.data.datasets[0].data = pts;
  c.data.datasets[0].backgroundColor = pts.map((r) => COLORS[r.y % COLORS.length]);
  c.$retrainTop = Math.max(1, ...pts.map((r) => r.n));
  c.options.scales.x.max = RETRAIN_BINS * retrainBin;
  c.options.scales.y.max = Math.max(policies.length, 1);
  $("retrain-bin").textContent = `${retrainBin.toLocaleString("en-US")} s`;
  c.$hasData = pts.length > 0;
  c.update();
}

function colourOf(share) {  // blue = CPU wins, orange = GPU wins, grey = no task
  if (share < 0) return "#e5e7eb";
  const a = [37, 99, 235], b = [234, 88, 12];
  const c = a.map((v, i) => Math.round(v + (b[i] - v) * share));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// text in at most ``width`` pixels: the font shrinks (down to 8 px) before anything is cut
function fitText(ctx, text, x, y, width) {
  let size = 11;
  ctx.font = `${size}px sans-serif`;
  while (size > 8 && ctx.measureText(text).width > width) { size -= 0.5; ctx.font = `${size}px sans-serif`; }
  ctx.fillText(text, x, y, width);
  ctx.font = "11px sans-serif";
}

function drawGrid(canvas, rows, cols, cell, text, rowLabels, colLabels, title) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width = canvas.clientWidth || 520, H = canvas.height = canvas.clientHeight || 300;
  ctx.clearRect(0, 0, W, H);
  ctx.font = "11px sans-serif";
  const left = Math.min(130, 8 + Math.max(40, ...rowLabels.map((l) => ctx.measureText(l).width))), top = 20, bottom = 34;
  const cw = (W - left - 10) / cols, ch = (H - top - bottom) / rows;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      ctx.fillStyle = cell(r, c);
      ctx.fillRect(left + c * cw, top + r * ch, cw - 1, ch - 1);
      ctx.fillStyle = "#111";
      ctx.textAlign = "center";
      ctx.fillText(text(r, c), left + (c + 0.5) * cw, top + (r + 0.5) * ch + 4);
    }
    ctx.textAlign = "right";
    fitText(ctx, rowLabels[r], left - 4, top + (r + 0.5) * ch + 4, left - 8);
  }
  ctx.textAlign = "center";
  for (let c = 0; c < cols; c++) fitText(ctx, colLabels[c], left + (c + 0.5) * cw, H - bottom + 14, cw - 4);
  ctx.fillText(title, left + (W - left) / 2, H - 4);
  canvas.dataset.drawn = "1";
}

function drawHeat(h) {
  const rows = h.gpu_share.length, cols = h.intensity_bins;
  const sizeLabels = [];
  for (let r = 0; r < rows; r++) sizeLabels.push(`${h.size_edges[r].toPrecision(2)}–${h.size_edges[r + 1].toPrecision(2)}`);
  const colLabels = [];
  for (let c = 0; c < cols; c++) colLabels.push(`${(c / cols).toFixed(2)}`);
  drawGrid($("chart-heat"), rows, cols, (r, c) => colourOf(h.gpu_share[r][c]),
    (r, c) => (h.count[r][c] ? `${Math.round(100 * h.gpu_share[r][c])}%` : ""), sizeLabels, colLabels,
    "compute intensity (rows: size, GFLOP; % = GPU wins)");
}

function drawWinLoss(w) {
  const n = w.policies.length;
  let max = 1;
  w.wins.forEach((row) => row.forEach((v) => (max = Math.max(max, v))));
  drawGrid($("chart-winloss"), n, n, (r, c) => (r === c ? "#f3f4f6" : `rgba(22,163,74,${0.1 + 0.9 * w.wins[r][c] / max})`),
    (r, c) => (r === c ? "" : String(w.wins[r][c])), w.policies, w.policies, "wins of row vs column");
}

async function gantt() {
  const p = $("policy").value;
  if (!p || !LIVE.has(raceState)) return;  // only a running or paused race has a Gantt window
  const r = await fetch(`/api/gantt?policy=${encodeURIComponent(p)}`);
  if (!r.ok) return;
  const g = await r.json();
  const labels = [];
  for (let d = 0; d < g.n_devices; d++) labels.push(d === 0 ? "CPU" : `GPU ${d - 1}`);
  charts.gantt.data.labels = labels;
  charts.gantt.data.datasets[0].data = g.parts.map((q) => ({ x: [q[1], q[2]], y: labels[q[0]] }));
  charts.gantt.data.datasets[0].backgroundColor = g.parts.map((q) => COLORS[q[3] % COLORS.length]);
  charts.gantt.options.scales.x.min = Math.max(0, g.now - WINDOW_S);
  charts.gantt.options.scales.x.max = Math.max(g.now, WINDOW_S);
  charts.gantt.$hasData = g.parts.length > 0;
  charts.gantt.update();
}

window.hybridschedCharts = charts;  // the browser test reads bar geometry
window.hybridschedUpdates = 0;  // updates drawn (the browser test waits for several)
function onUpdate(u) {
  window.hybridschedUpdates += 1;
  nDevices = (u.utilisation && Object.values(u.utilisation)[0] || []).length || nDevices;
  showStatus({ state: u.state, run_id: u.run_id, tasks: u.tasks, sim_time: u.sim_time, speed: u.speed,
               policies: u.winloss.policies, tasks_per_s: u.tasks_per_s, resumable: u.resumable, phase: u.phase });
  drawRace(u.policies);
  drawCdf(u.cdf);
  utilHistory.push({ t: u.sim_time, util: u.utilisation });
  while (utilHistory.length > 600 || (utilHistory.length && utilHistory[0].t < u.sim_time - WINDOW_S)) utilHistory.shift();
  drawUtil();
  drawHeat(u.heatmap);
  drawWinLoss(u.winloss);
  drawRetrains();
}

function onNotification(n) {
  for (const e of n.events) {
    if (e.kind === "retrain") addRetrain(e.policy, e.sim_time);
    if (e.kind === "run_started") { retrainCounts.clear(); retrainBin = 1; utilHistory.length = 0; }
    if (e.kind === "error") $("message").textContent = e.message;
  }
  drawRetrains();
}

function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.type === "simulation_update") onUpdate(m);
    else if (m.type === "notification") onNotification(m);
    else if (m.type === "hello") showStatus(m);
  };
  ws.onclose = () => setTimeout(connect, 1000);
}

async function post(path, body) {
  $("message").textContent = "";
  const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${tokenBox.value}` },
                                body: body ? JSON.stringify(body) : undefined });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) $("message").textContent = `${r.status}: ${j.detail || r.statusText}`;
  await refreshStatus();
  return r.ok;
}

async function refreshStatus() {
  const r = await fetch("/api/simulation/status");
  if (r.ok) showStatus(await r.json());
}

// Start and Continue show "starting" at once: the answer comes once every policy is built
async function start(body) {
  startPending = true;
  showStatus({ state: raceState, speed: Number($("speed").value) });
  try { await post("/api/simulation/start", body); } finally { startPending = false; }
  await refreshStatus();
}
$("btn-start").onclick = () => start({ workload: $("workload").value || null, speed: Number($("speed").value) });
$("btn-pause").onclick = () => post("/api/simulation/pause");
$("btn-resume").onclick = () => post("/api/simulation/resume");
$("btn-stop").onclick = () => post("/api/simulation/stop");
$("btn-continue").onclick = () => start({ resume: true });
$("btn-speed").onclick = () => post("/api/simulation/speed", { speed: Number($("speed").value) });

for (const c of COLORS) {  // the Gantt legend's colour cycle
  const sw = document.createElement("span");
  sw.className = "swatch";
  sw.style.background = c;
  $("legend-gantt-colours").appendChild(sw);
}

(async function init() {
  const c = await (await fetch("/api/config")).json();
  const wl = $("workload");
  wl.add(new Option("(configured)", ""));
  for (const w of c.workloads) wl.add(new Option(w, w));
  $("speed").value = c.speed;
  nDevices = c.n_devices;
  setPolicies(c.default_policies);
  const out = Object.keys(c.left_out || {});  // configured policies whose model is missing
  if (out.length) $("message").textContent = `left out of the race (no model): ${out.join(", ")}`;
  await refreshStatus();
  connect();
  setInterval(gantt, 1000);
  setInterval(refreshStatus, 2000);
})();
