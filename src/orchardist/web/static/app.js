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
// Run states `orchardist resume` takes on (no orchestrator drives them).
const RESUMABLE = ["awaiting_review", "interrupted", "stopped"];
// " · " between the parts that have a value: no "cost -", no trailing "·" for what is unknown.
function joined(parts) { return parts.filter((p) => p !== null && p !== undefined && p !== "").join(" · "); }

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
  for (const kind of ["run", "task", "attempt", "round", "merge", "regression", "breaker", "usage", "message", "review"]) {
    source.addEventListener(kind, handler);
  }
  return source;
}

// Refresh on any change of the store (every run's), coalesced: the Review page.
function followAll(onChange) {
  const source = new EventSource("/api/changes");
  let pending = null;
  source.onopen = () => live.classList.add("on");
  source.onerror = () => live.classList.remove("on");
  source.addEventListener("change", () => {
    if (pending) return;
    pending = setTimeout(() => { pending = null; onChange(); }, 150);
  });
  return source;
}

// -- runs --------------------------------------------------------------------------------------

async function showRuns() {
  await drawRuns();
  followAll(drawRuns);  // live: a new run, a state, a task awaiting review
}

async function drawRuns() {
  crumbs.textContent = "";
  const runs = await getJSON("/api/runs");
  const rows = runs.map((r) => el("tr", { "data-run": r.run },
    el("td", {}, el("a", { href: `/runs/${encodeURIComponent(r.run)}` }, r.run)),
    el("td", {}, stateSpan(r.state)),
    el("td", { class: "plan", title: r.plan }, r.plan_name),
    el("td", {}, r.branch),
    el("td", {}, fmtTime(r.created_at)),
    el("td", {}, fmtDur(r.duration_s)),
    el("td", {}, fmtCost(r.cost_usd)),
    el("td", {}, `${r.summary.done || 0} done, ${r.summary.failed || 0} failed, ${r.tasks} tasks`,
      ...(r.summary.awaiting_review ? [" · ", el("a", { href: "/review", class: "s-awaiting_review" }, `${r.summary.awaiting_review} awaiting review`)] : [])),
  ));
  main.replaceChildren(
    el("h2", {}, "Runs"),
    runs.length ? el("table", { id: "runs" },
      el("tr", {}, ...["run", "state", "plan", "branch", "started", "duration", "cost", "tasks"].map((h) => el("th", {}, h))),
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
  // Nodes as wide as the longest name (up to LABEL_MAX characters; past that, cut, the full
  // name on hover).
  const LABEL_MAX = 48, CHAR_W = 7.2;
  const longest = Math.min(LABEL_MAX, Math.max(8, ...doc.tasks.map((t) => t.id.length)));
  const W = Math.ceil(longest * CHAR_W) + 16, H = 26, GX = 50, GY = 14;
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
    label.textContent = t.id.length > LABEL_MAX ? `${t.id.slice(0, LABEL_MAX - 1)}…` : t.id;
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
  for (const tick of ticks(t1 - t0)) {
    const x = scale(t0 + tick);
    svg.append(svgEl("line", { class: "tick", x1: x, x2: x, y1: 14, y2: height, "data-s": tick }));
    const label = svgEl("text", { class: "tick-label", x: x + 2, y: 11, "font-size": 10, fill: "#6b7075" });
    label.textContent = fmtDur(tick);
    svg.append(label);
  }
  return svg;
}

// Round times for the timeline's ticks: about six over the run's span.
function ticks(span) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400];
  const step = steps.find((s) => span / s <= 6) || 86400 * Math.ceil(span / 86400 / 6);
  const out = [];
  for (let t = 0; t <= span + 1e-9; t += step) out.push(t);
  return out;
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
    el("td", { class: "reason", title: t.reason || "" }, t.finding || ""),
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
      el("p", { class: "kv", id: "run-meta" }, joined([`plan ${doc.plan.split("/").pop()}`, `branch ${doc.branch}`, `started ${fmtTime(doc.created_at)}`,
        totals.cost_usd == null ? null : `cost ${fmtCost(totals.cost_usd)}`, doc.reason])),
      el("p", {},
        ...(doc.state === "running" ? [actionButton("cancel run", "cancel", `/api/runs/${encodeURIComponent(doc.run)}/cancel`)] : []),
        ...(["failed", "cancelled"].includes(doc.state) ? [actionButton("retry failed tasks", "retry", `/api/runs/${encodeURIComponent(doc.run)}/retry`)] : []),
        ...(RESUMABLE.includes(doc.state) ? [actionButton("resume run", "resume", `/api/runs/${encodeURIComponent(doc.run)}/resume`)] : []),
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

// Live redraws wait while the reviewer types or presses: a redraw would take the caret, or
// swap a button between its mousedown and mouseup (and then no click happens).
let pressing = false;
document.addEventListener("pointerdown", () => { pressing = true; }, true);
document.addEventListener("pointerup", () => { setTimeout(() => { pressing = false; }, 0); }, true);
function busy() {
  const active = document.activeElement;
  return pressing || (main.contains(active) && active.tagName === "TEXTAREA");
}

// The attempt line: only what is known (a running attempt has no exit code or cost yet).
function attemptLine(a) {
  return joined([a.verdict, a.selection, a.duration_s == null ? null : fmtDur(a.duration_s),
    a.exit_code == null ? null : `exit ${a.exit_code}`, a.cost_usd == null ? null : `cost ${fmtCost(a.cost_usd)}`]);
}

function attemptSection(a, review) {
  // A log with no tool events (a shell agent, a scripted one) is its own transcript: shown open.
  const events = (a.transcript || []).some((e) => e.kind !== "output");
  return el("section", { class: "attempt", "data-attempt": a.n, "data-state": a.state },
    el("h2", {}, `attempt ${a.n}`, a.candidate ? ` (candidate ${a.candidate})` : "", ` · ${a.agent} · `, stateSpan(a.state),
      a.state === "merged" ? el("span", { class: "winner" }, " winner") : ""),
    el("p", { class: "kv" }, attemptLine(a)),
    el("p", { class: "detail", title: a.detail || "" }, a.finding || ""),
    ...(a.diff ? [el("h3", {}, "diff"), diffBlock(a.diff, review)] : []),
    ...testsBlock(a.tests || []),
    ...(events ? transcriptBlock(a.transcript) : []),
    el("details", { class: "raw-log", ...(events ? {} : { open: "" }) }, el("summary", {}, "log", a.log_tail.cut ? " (end)" : ""), el("pre", { class: "log" }, a.log_tail.text)),
  );
}

// The attempt under review: the winner not merged yet (as runs/review.py picks it).
function reviewedAttempt(task) {
  if (task.state !== "awaiting_review") return null;
  const passed = task.attempts.filter((a) => a.state === "passed" && a.won && a.diff);
  return passed.length ? passed.reduce((x, y) => (y.n > x.n ? y : x)) : null;
}

// The lists a reader opened (a verify's passes, a raw log) stay open through live redraws: the
// first comes just after the page shows, when the run's events (all of them) arrive.
function listKey(d) {
  const section = d.closest("section.attempt");
  return `${section.dataset.attempt} ${[...section.querySelectorAll("details")].indexOf(d)}`;
}

function openLists(taskId) {
  if (document.getElementById("task-id")?.textContent !== taskId) return new Set();
  return new Set([...main.querySelectorAll("section.attempt details[open]")].map(listKey));
}

async function showTask(runId, taskId) {
  let tails = [];
  let waiting = false;
  const review = reviewDraft(runId, taskId);
  const render = async () => {
    if (busy()) {  // redrawn once the reviewer has let go
      if (!waiting) {
        waiting = true;
        const again = () => {
          document.removeEventListener("focusout", again, true);
          document.removeEventListener("pointerup", again, true);
          waiting = false;
          setTimeout(render, 0);
        };
        document.addEventListener("focusout", again, true);
        document.addEventListener("pointerup", again, true);
      }
      return;
    }
    const task = await getJSON(`/api/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(taskId)}`);
    // The reviewer may have opened a comment box while the task was fetched: redraw later
    if (busy()) return render();
    for (const source of tails) source.close();
    tails = [];
    crumbs.replaceChildren(" / ", el("a", { href: `/runs/${encodeURIComponent(runId)}` }, runId), " / ", taskId);
    const underReview = reviewedAttempt(task);
    const sections = task.attempts.map((a) => attemptSection(a, a === underReview ? review : null));
    const opened = openLists(taskId);
    main.replaceChildren(
      el("h2", {}, "Task ", el("span", { id: "task-id" }, task.id), " ", el("span", { id: "task-state" }, stateSpan(task.state))),
      el("p", { class: "kv", title: task.reason || "" }, task.finding || ""),
      el("p", {},
        ...(["failed", "blocked", "cancelled"].includes(task.state) && ["failed", "cancelled"].includes(task.run_state)
          ? [actionButton("retry this task", "retry", `/api/runs/${encodeURIComponent(runId)}/retry`, { tasks: [taskId] })] : []),
        " ", el("span", { id: "action-note", class: "muted" })),
      ...(underReview && !(task.reviews || []).some((r) => r.attempt === underReview.n) ? [reviewForm(runId, taskId, review)] : []),
      ...reviewHistory(task, RESUMABLE.includes(task.run_state)),
      ...sections,
    );
    for (const d of main.querySelectorAll("section.attempt details")) if (opened.has(listKey(d))) d.open = true;
    // Running attempts: their log grows between events; stream what is appended.
    for (const a of task.attempts.filter((x) => x.ended_at === null)) {
      const section = main.querySelector(`section[data-attempt="${a.n}"]`);
      section.querySelector("details.raw-log").open = true;
      const pre = section.querySelector("pre.log");
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
    else if (parts[0] === "review" && parts.length === 1) await showReview();
    else await showRuns();
  } catch (error) {
    main.replaceChildren(el("p", { class: "error" }, String(error)));
  }
}

route();
