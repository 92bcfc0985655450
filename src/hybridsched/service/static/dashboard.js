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
const retrains = [];     // {x: sim_time, y: policy index, policy}
const WINDOW_S = 60;     // the utilisation and Gantt window (simulated s), as the server's stats.WINDOW_S
let lastRate = null;     // tasks/s from the latest status or update: the header keeps it while running
const mark = (chart) => { chart.canvas.dataset.drawn = "1"; };
// log axes: label only 1, 2, 5 x 10^k (or only 10^k over many decades) so labels never overlap
function logTicks(value, index, ticks) {
  const lo = ticks[0] ? ticks[0].value : value, hi = ticks.length ? ticks[ticks.length - 1].value : value;
  const decades = Math.log10(Math.max(hi, 1e-12) / Math.max(lo, 1e-12));
  const m = Math.round(value / Math.pow(10, Math.floor(Math.log10(value) + 1e-9)));
  const keep = decades > 3 ? m === 1 : (m === 1 || m === 2 || m === 5);
  return keep ? Number(value.toPrecision(3)).toLocaleString("en-US", { maximumSignificantDigits: 3 }) : "";
}
const LOG_TICKS = { autoSkip: true, autoSkipPadding: 8, maxRotation: 0, callback: logTicks };
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
  retrain: new Chart($("chart-retrain"), { type: "scatter", data: { datasets: [{ label: "retrain", data: [], pointRadius: 3 }] },
    options: { plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: "sim time (s)" } },
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

function showStatus(s) {
  const st = $("status");
  st.dataset.state = s.state;
  if (s.tasks_per_s !== undefined && s.tasks_per_s !== null) lastRate = s.tasks_per_s;
  const rate = s.state === "running" && lastRate !== null ? ` · ${Math.round(lastRate).toLocaleString("en-US")} tasks/s` : "";
  const resumable = s.resumable ? " · resumable" : "";
  st.textContent = `${s.state} · run ${s.run_id ?? "-"} · ${(s.tasks ?? 0).toLocaleString("en-US")} tasks · sim ${(s.sim_time ?? 0).toFixed(1)} s · speed ${s.speed}${rate}${resumable}`;
  // a run left by a stopped or killed server can be continued (POST start {"resume": true})
  const cont = $("btn-continue");
  cont.hidden = !s.resumable;
  cont.textContent = `Continue run ${s.run_id ?? ""}`;
  if (s.state === "interrupted") $("message").textContent = `run ${s.run_id} was interrupted (the server stopped during it); Continue resumes it`;
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

function drawRetrains() {
  charts.retrain.data.datasets[0].data = retrains;
  charts.retrain.data.datasets[0].backgroundColor = retrains.map((r) => COLORS[r.y % COLORS.length]);
  charts.retrain.options.scales.y.max = Math.max(policies.length, 1);
  charts.retrain.$hasData = retrains.length > 0;
  charts.retrain.update();
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
  if (!p) return;
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
               policies: u.winloss.policies, tasks_per_s: u.tasks_per_s, resumable: u.resumable });
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
    if (e.kind === "retrain") retrains.push({ x: e.sim_time, y: Math.max(0, policies.indexOf(e.policy)), policy: e.policy });
    if (e.kind === "run_started") { retrains.length = 0; utilHistory.length = 0; }
    if (e.kind === "error") $("message").textContent = e.message;
  }
  while (retrains.length > 2000) retrains.shift();
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

$("btn-start").onclick = () => post("/api/simulation/start", { workload: $("workload").value || null, speed: Number($("speed").value) });
$("btn-pause").onclick = () => post("/api/simulation/pause");
$("btn-resume").onclick = () => post("/api/simulation/resume");
$("btn-stop").onclick = () => post("/api/simulation/stop");
$("btn-continue").onclick = () => post("/api/simulation/start", { resume: true });
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
