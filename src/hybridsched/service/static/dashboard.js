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
const mark = (chart) => { chart.canvas.dataset.drawn = "1"; };
const drawnPlugin = { id: "drawn", afterDraw(chart) { if (chart.$hasData) mark(chart); } };
Chart.register(drawnPlugin);
Chart.defaults.animation = false;
Chart.defaults.maintainAspectRatio = false;

const charts = {
  race: new Chart($("chart-race"), { type: "bar", data: { labels: [], datasets: [{ label: "mean latency (s)", data: [], backgroundColor: COLORS }] },
    options: { plugins: { legend: { display: false } }, scales: { y: { type: "logarithmic", title: { display: true, text: "s" } } } } }),
  cdf: new Chart($("chart-cdf"), { type: "line", data: { datasets: [] },
    options: { parsing: false, scales: { x: { type: "logarithmic", title: { display: true, text: "latency (s)" } }, y: { min: 0, max: 1 } } } }),
  util: new Chart($("chart-util"), { type: "line", data: { datasets: [] },
    options: { parsing: false, scales: { x: { type: "linear", title: { display: true, text: "sim time (s)" } }, y: { min: 0, max: 1 } } } }),
  retrain: new Chart($("chart-retrain"), { type: "scatter", data: { datasets: [{ label: "retrain", data: [], pointRadius: 3 }] },
    options: { plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: "sim time (s)" } },
      y: { ticks: { stepSize: 1, callback: (v) => policies[v] ?? "" }, min: -1 } } } }),
  gantt: new Chart($("chart-gantt"), { type: "bar", data: { labels: [], datasets: [{ label: "parts", data: [], backgroundColor: [] }] },
    options: { indexAxis: "y", parsing: { xAxisKey: "x", yAxisKey: "y" }, plugins: { legend: { display: false } },
      scales: { x: { type: "linear", title: { display: true, text: "sim time (s)" } }, y: { type: "category" } } } }),
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
  const rate = s.tasks_per_s !== undefined && s.tasks_per_s !== null ? ` · ${Math.round(s.tasks_per_s)} tasks/s` : "";
  st.textContent = `${s.state} · run ${s.run_id ?? "-"} · ${s.tasks ?? 0} tasks · sim ${(s.sim_time ?? 0).toFixed(1)} s · speed ${s.speed}${rate}`;
  if (s.policies && s.policies.length) setPolicies(s.policies);
}

function drawRace(summary) {
  const names = Object.keys(summary);
  charts.race.data.labels = names;
  charts.race.data.datasets[0].data = names.map((p) => summary[p].mean_latency);
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

function drawGrid(canvas, rows, cols, cell, text, rowLabels, colLabels, title) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width = canvas.clientWidth || 520, H = canvas.height = canvas.clientHeight || 300;
  ctx.clearRect(0, 0, W, H);
  const left = 90, top = 20, bottom = 34;
  const cw = (W - left - 10) / cols, ch = (H - top - bottom) / rows;
  ctx.font = "11px sans-serif";
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      ctx.fillStyle = cell(r, c);
      ctx.fillRect(left + c * cw, top + r * ch, cw - 1, ch - 1);
      ctx.fillStyle = "#111";
      ctx.textAlign = "center";
      ctx.fillText(text(r, c), left + (c + 0.5) * cw, top + (r + 0.5) * ch + 4);
    }
    ctx.textAlign = "right";
    ctx.fillText(rowLabels[r], left - 4, top + (r + 0.5) * ch + 4);
  }
  ctx.textAlign = "center";
  for (let c = 0; c < cols; c++) ctx.fillText(colLabels[c], left + (c + 0.5) * cw, H - bottom + 14);
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
    (r, c) => (r === c ? "" : String(w.wins[r][c])), w.policies, w.policies.map((p) => p.slice(0, 10)), "wins of row vs column");
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
  charts.gantt.options.scales.x.min = g.now - 60;
  charts.gantt.options.scales.x.max = g.now;
  charts.gantt.$hasData = g.parts.length > 0;
  charts.gantt.update();
}

window.hybridschedUpdates = 0;  // updates drawn (the browser test waits for several)
function onUpdate(u) {
  window.hybridschedUpdates += 1;
  nDevices = (u.utilisation && Object.values(u.utilisation)[0] || []).length || nDevices;
  showStatus({ state: u.state, run_id: u.run_id, tasks: u.tasks, sim_time: u.sim_time, speed: u.speed,
               policies: u.winloss.policies });
  drawRace(u.policies);
  drawCdf(u.cdf);
  utilHistory.push({ t: u.sim_time, util: u.utilisation });
  while (utilHistory.length > 600) utilHistory.shift();
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
$("btn-speed").onclick = () => post("/api/simulation/speed", { speed: Number($("speed").value) });

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
