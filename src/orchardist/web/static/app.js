// The dashboard's pages. Everything from the server is data, agents' output included: it is
// only ever put into the page as text (textContent, attributes), never parsed as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");
const live = document.getElementById("live");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

// Buttons that change something POST with our header (the server refuses cross-site requests).
async function act(url, body) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-Orchardist-Action": "1", "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  const answer = await response.json().catch(() => ({}));
  const note = document.getElementById("action-note");
  if (note) note.textContent = response.ok ? "requested" : `refused: ${answer.error || answer.output || response.status}`;
}

function actionButton(label, id, url, body) {
  const button = el("button", { id, type: "button" }, label);
  button.addEventListener("click", () => { button.disabled = true; act(url, body); });
  return button;
}

function fmtTime(ts) { return ts ? new Date(ts * 1000).toLocaleString() : "-"; }
function fmtDur(s) {
  if (s === null || s === undefined) return "-";
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m}m${Math.round(s % 60)}s` : `${Math.floor(m / 60)}h${m % 60}m`;
}
function fmtCost(c) { return c === null || c === undefined ? "-" : `$${Number(c).toFixed(4)}`; }
function stateSpan(state) { return el("span", { class: `state s-${state}` }, state); }

// Refresh on every event of the run (coalesced), without reloading the page.
function follow(runId, onChange, filter) {
  const source = new EventSource(`/api/runs/${encodeURIComponent(runId)}/events`);
  let pending = null;
  source.onopen = () => live.classList.add("on");
  source.onerror = () => live.classList.remove("on");
  source.onmessage = source.onevent = null;
  const handler = (message) => {
    const event = JSON.parse(message.data);
    if (filter && !filter(event)) return;
    if (pending) return;
    pending = setTimeout(() => { pending = null; onChange(); }, 150);
  };
  for (const kind of ["run", "task", "attempt", "round", "merge", "regression", "breaker", "usage", "message"]) {
    source.addEventListener(kind, handler);
  }
  return source;
}

// -- runs --------------------------------------------------------------------------------------

async function showRuns() {
  crumbs.textContent = "";
  const runs = await getJSON("/api/runs");
  const rows = runs.map((r) => el("tr", { "data-run": r.run },
    el("td", {}, el("a", { href: `/runs/${encodeURIComponent(r.run)}` }, r.run)),
    el("td", {}, stateSpan(r.state)),
    el("td", {}, r.branch),
    el("td", {}, fmtTime(r.created_at)),
    el("td", {}, fmtDur(r.duration_s)),
    el("td", {}, fmtCost(r.cost_usd)),
    el("td", {}, `${r.summary.done || 0} done, ${r.summary.failed || 0} failed, ${r.tasks} tasks`),
  ));
  main.replaceChildren(
    el("h2", {}, "Runs"),
    runs.length ? el("table", { id: "runs" },
      el("tr", {}, ...["run", "state", "branch", "started", "duration", "cost", "tasks"].map((h) => el("th", {}, h))),
      ...rows) : el("p", { class: "muted" }, "no runs yet"),
  );
}

// -- a run ---------------------------------------------------------------------------------------

function layers(tasks, edges) {
  const deps = new Map(tasks.map((t) => [t.id, []]));
  for (const [from, to] of edges) if (deps.has(to) && deps.has(from)) deps.get(to).push(from);
  const depth = new Map();
  const visit = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const d = Math.max(-1, ...deps.get(id).map((p) => visit(p, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  for (const t of tasks) visit(t.id, new Set());
  return depth;
}

function drawGraph(doc) {
  const edges = doc.graph.edges;
  const depth = layers(doc.tasks, edges);
  const columns = new Map();
  for (const t of doc.tasks) {
    const d = depth.get(t.id);
    if (!columns.has(d)) columns.set(d, []);
    columns.get(d).push(t);
  }
  const W = 150, H = 26, GX = 50, GY = 14;
  const pos = new Map();
  let rows = 0;
  for (const [d, col] of columns) {
    col.forEach((t, i) => pos.set(t.id, { x: 10 + d * (W + GX), y: 10 + i * (H + GY) }));
    rows = Math.max(rows, col.length);
  }
  const width = 20 + columns.size * (W + GX), height = 20 + rows * (H + GY);
  const svg = svgEl("svg", { id: "graph", width, height, viewBox: `0 0 ${width} ${height}` });
  const defs = svgEl("defs");
  const marker = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: "#999" }));
  defs.append(marker);
  svg.append(defs);
  for (const [from, to] of edges) {
    const a = pos.get(from), b = pos.get(to);
    if (!a || !b) continue;
    svg.append(svgEl("path", { class: "edge", d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}` }));
  }
  const critical = new Set(doc.graph.critical_path);
  for (const t of doc.tasks) {
    const p = pos.get(t.id);
    const g = svgEl("g", { class: `node${critical.has(t.id) ? " critical" : ""}`, "data-task": t.id, "data-state": t.state });
    g.append(svgEl("rect", { x: p.x, y: p.y, width: W, height: H, class: `f-${t.state}` }));
    const label = svgEl("text", { x: p.x + 8, y: p.y + 17 });
    label.textContent = t.id.length > 20 ? `${t.id.slice(0, 19)}…` : t.id;
    const title = svgEl("title");
    title.textContent = `${t.id}: ${t.state}`;
    g.append(label, title);
    g.addEventListener("click", () => { location.href = `/runs/${encodeURIComponent(doc.run)}/tasks/${encodeURIComponent(t.id)}`; });
    svg.append(g);
  }
  return svg;
}

function drawGantt(doc) {
  const attempts = [];
  for (const t of doc.tasks) for (const a of t.attempts) attempts.push({ task: t.id, ...a });
  attempts.sort((x, y) => x.started_at - y.started_at);
  const now = Date.now() / 1000;
  const t0 = doc.created_at;
  const t1 = Math.max(doc.finished_at || now, ...attempts.map((a) => a.ended_at || now), t0 + 1);
  const slots = [];
  for (const a of attempts) {
    const end = a.ended_at || now;
    let slot = slots.findIndex((last) => last <= a.started_at + 1e-6);
    if (slot < 0) { slot = slots.length; slots.push(end); } else { slots[slot] = end; }
    a.slot = slot;
  }
  const W = 900, RH = 22, left = 70;
  const height = 30 + Math.max(1, slots.length) * (RH + 4);
  const svg = svgEl("svg", { id: "gantt", width: W + left + 10, height });
  const scale = (ts) => left + ((ts - t0) / (t1 - t0)) * W;
  for (let i = 0; i < slots.length; i++) {
    const label = svgEl("text", { x: 4, y: 20 + i * (RH + 4) + 15, "font-size": 11 });
    label.textContent = `slot ${i + 1}`;
    svg.append(label);
  }
  for (const a of attempts) {
    const x = scale(a.started_at), w = Math.max(2, scale(a.ended_at || now) - x);
    const g = svgEl("g", { class: "bar", "data-task": a.task, "data-attempt": a.n });
    g.append(svgEl("rect", { x, y: 20 + a.slot * (RH + 4), width: w, height: RH, class: `f-${a.state}` }));
    const label = svgEl("text", { x: x + 4, y: 20 + a.slot * (RH + 4) + 15 });
    label.textContent = w > 60 ? `${a.task}#${a.n}` : "";
    const title = svgEl("title");
    title.textContent = `${a.task} attempt ${a.n} (${a.agent}): ${a.state}, ${fmtDur((a.ended_at || now) - a.started_at)}`;
    g.append(label, title);
    svg.append(g);
  }
  const axis = svgEl("text", { x: left, y: 12, "font-size": 11, fill: "#6b7075" });
  axis.textContent = `0 — ${fmtDur(t1 - t0)}`;
  svg.append(axis);
  return svg;
}

function tasksTable(doc) {
  const head = el("tr", {}, ...["task", "state", "attempts", "winner", "verdicts", "cost", "tokens in/out", "reason"].map((h) => el("th", {}, h)));
  const rows = doc.tasks.map((t) => el("tr", { "data-task": t.id },
    el("td", {}, el("a", { href: `/runs/${encodeURIComponent(doc.run)}/tasks/${encodeURIComponent(t.id)}` }, t.id)),
    el("td", { class: "task-state" }, stateSpan(t.state)),
    el("td", {}, t.attempts.map((a) => `#${a.n}${a.candidate ? `/c${a.candidate}` : ""} ${a.agent} ${a.state}`).join(", ") || "-"),
    el("td", {}, t.winner ? `#${t.winner.attempt} (candidate ${t.winner.candidate})` : "-"),
    el("td", {}, t.attempts.map((a) => a.verdict || a.failure || "").filter(Boolean).join(", ") || "-"),
    el("td", {}, fmtCost(t.cost_usd)),
    el("td", {}, `${t.input_tokens ?? "-"}/${t.output_tokens ?? "-"}`),
    el("td", {}, t.reason || ""),
  ));
  return el("table", { id: "tasks" }, head, ...rows);
}

async function showRun(runId) {
  const render = async () => {
    const doc = await getJSON(`/api/runs/${encodeURIComponent(runId)}`);
    crumbs.replaceChildren(" / ", el("a", { href: `/runs/${encodeURIComponent(runId)}` }, runId));
    const totals = doc.totals || {};
    main.replaceChildren(
      el("h2", {}, "Run ", el("span", { id: "run-id" }, doc.run), " ", el("span", { id: "run-state" }, stateSpan(doc.state))),
      el("p", { class: "kv" }, `branch ${doc.branch} · started ${fmtTime(doc.created_at)} · cost ${fmtCost(totals.cost_usd)} · ${doc.reason || ""}`),
      el("p", {},
        ...(doc.state === "running" ? [actionButton("cancel run", "cancel", `/api/runs/${encodeURIComponent(doc.run)}/cancel`)] : []),
        ...(["failed", "cancelled"].includes(doc.state) ? [actionButton("retry failed tasks", "retry", `/api/runs/${encodeURIComponent(doc.run)}/retry`)] : []),
        " ", el("span", { id: "action-note", class: "muted" })),
      el("h2", {}, "Graph", el("span", { class: "muted" }, doc.graph.from_plan ? "  (thick border: critical path)" : "  (the plan file is gone: no edges)")),
      drawGraph(doc),
      el("h2", {}, "Timeline"),
      drawGantt(doc),
      el("h2", {}, "Tasks"),
      tasksTable(doc),
    );
  };
  await render();
  follow(runId, render);
}

// -- a task --------------------------------------------------------------------------------------

function diffView(text) {
  const pre = el("pre", { class: "diff" });
  for (const line of text.split("\n")) {
    let cls = "";
    if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")) cls = "file";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    else if (line.startsWith("@@")) cls = "hunk";
    pre.append(cls ? el("span", { class: cls }, line) : document.createTextNode(line), "\n");
  }
  return pre;
}

async function showTask(runId, taskId) {
  let tails = [];
  const render = async () => {
    for (const source of tails) source.close();
    tails = [];
    const task = await getJSON(`/api/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(taskId)}`);
    crumbs.replaceChildren(" / ", el("a", { href: `/runs/${encodeURIComponent(runId)}` }, runId), " / ", taskId);
    const sections = task.attempts.map((a) => el("section", { class: "attempt", "data-attempt": a.n },
      el("h2", {}, `attempt ${a.n}`, a.candidate ? ` (candidate ${a.candidate})` : "", ` · ${a.agent} · `, stateSpan(a.state)),
      el("p", { class: "kv" }, `${a.verdict || ""} ${a.selection || ""} · ${fmtDur(a.duration_s)} · exit ${a.exit_code ?? "-"} · cost ${fmtCost(a.cost_usd)}`),
      el("p", { class: "detail" }, a.detail || ""),
      el("h2", {}, "log", a.log_tail.cut ? " (end)" : ""),
      el("pre", { class: "log" }, a.log_tail.text),
      ...(a.diff ? [el("h2", {}, "diff"), diffView(a.diff)] : []),
    ));
    main.replaceChildren(
      el("h2", {}, "Task ", el("span", { id: "task-id" }, task.id), " ", el("span", { id: "task-state" }, stateSpan(task.state))),
      el("p", { class: "kv" }, task.reason || ""),
      el("p", {},
        ...(["failed", "blocked", "cancelled"].includes(task.state) && ["failed", "cancelled"].includes(task.run_state)
          ? [actionButton("retry this task", "retry", `/api/runs/${encodeURIComponent(runId)}/retry`, { tasks: [taskId] })] : []),
        " ", el("span", { id: "action-note", class: "muted" })),
      ...sections,
    );
    // Running attempts: their log grows between events; stream what is appended.
    for (const a of task.attempts.filter((x) => x.ended_at === null)) {
      const pre = main.querySelector(`section[data-attempt="${a.n}"] pre.log`);
      const url = `/api/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(taskId)}/attempts/${a.n}/log`;
      const source = new EventSource(url);
      let first = true;
      source.onmessage = (message) => {
        if (first) { pre.textContent = ""; first = false; }
        pre.append(document.createTextNode(JSON.parse(message.data)));
      };
      source.addEventListener("end", () => source.close());
      tails.push(source);
    }
  };
  await render();
  follow(runId, render, (event) => !event.task || event.task === taskId);
}

async function route() {
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "runs" && parts.length === 2) await showRun(parts[1]);
    else if (parts[0] === "runs" && parts[2] === "tasks" && parts.length === 4) await showTask(parts[1], parts[3]);
    else await showRuns();
  } catch (error) {
    main.replaceChildren(el("p", { class: "error" }, String(error)));
  }
}

route();
