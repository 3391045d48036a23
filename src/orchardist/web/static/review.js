// The task page's review half: the diff (unified or side by side, syntax coloured, a comment
// on a line by clicking it), the verify results test by test, the agent's transcript, the
// review form, and the Review page. Agents' output is data: only ever put in as text.
"use strict";

// -- a small syntax highlighter ---------------------------------------------------------------
// Comments, strings, numbers and keywords, by the file's extension; enough to read a diff by.

const HASH_COMMENTS = new Set(["py", "sh", "bash", "toml", "yaml", "yml", "rb", "pl", "r", "cfg", "ini", "mk", "dockerfile"]);
const SLASH_COMMENTS = new Set(["js", "mjs", "cjs", "ts", "tsx", "jsx", "c", "h", "cc", "cpp", "hpp", "go", "rs", "java", "kt", "swift", "cs", "scala", "css", "scss", "php"]);
const KEYWORDS = new Set((
  "and as assert async await break case catch class const continue def default defer del do elif else " +
  "enum except export extends false False final finally fn for from func function go if impl import in " +
  "interface is lambda let loop match mod mut new nil None nonlocal not null or package pass pub raise " +
  "return self static struct super switch this throw true True try type typeof use var void where while " +
  "with yield"
).split(" "));

function languageOf(path) {
  const name = path.split("/").pop().toLowerCase();
  if (name === "makefile") return "mk";
  if (name === "dockerfile") return "dockerfile";
  return name.includes(".") ? name.split(".").pop() : "";
}

function tokenPattern(lang) {
  const comment = HASH_COMMENTS.has(lang) ? "#.*" : SLASH_COMMENTS.has(lang) ? "\\/\\/.*|\\/\\*.*?(?:\\*\\/|$)" : null;
  if (comment === null && !KNOWN_CODE.has(lang)) return null;
  const parts = [comment, `"(?:[^"\\\\]|\\\\.)*"?`, `'(?:[^'\\\\]|\\\\.)*'?`, "`[^`]*`?", "\\b\\d[\\d_.xXa-fA-F]*\\b", "\\b[A-Za-z_]\\w*\\b"];
  return new RegExp(parts.filter(Boolean).join("|"), "g");
}
const KNOWN_CODE = new Set(["json", "md", "txt", "html", "xml", "sql", "lua", "hs", "ex", "exs", "erl", "clj"]);

// The line as nodes: text, with spans for the tokens that get a colour.
function highlight(text, lang) {
  const pattern = tokenPattern(lang);
  if (!pattern || lang === "txt" || lang === "md") return [document.createTextNode(text)];
  const out = [];
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    const token = match[0];
    if (!token) continue;
    let cls = null;
    if (token.startsWith("#") || token.startsWith("//") || token.startsWith("/*")) cls = "tok-com";
    else if (/^["'`]/.test(token)) cls = "tok-str";
    else if (/^\d/.test(token)) cls = "tok-num";
    else if (KEYWORDS.has(token)) cls = "tok-kw";
    if (!cls) continue;
    if (match.index > at) out.push(document.createTextNode(text.slice(at, match.index)));
    out.push(el("span", { class: cls }, token));
    at = match.index + token.length;
  }
  if (at < text.length) out.push(document.createTextNode(text.slice(at)));
  return out;
}

// -- the diff -----------------------------------------------------------------------------------

function parseDiff(text) {
  const files = [];
  const stat = [];
  let file = null, hunk = null, oldNo = 0, newNo = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("diff --git ")) {
      file = { path: line.replace(/^diff --git a\/.* b\//, ""), header: [line], hunks: [] };
      files.push(file);
      hunk = null;
    } else if (!file) {
      if (line.trim()) stat.push(line);
    } else if (line.startsWith("@@")) {
      const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
      oldNo = m ? Number(m[1]) : 0; newNo = m ? Number(m[2]) : 0;
      hunk = { header: line, lines: [] };
      file.hunks.push(hunk);
    } else if (!hunk) {
      if (line.startsWith("+++ b/")) file.path = line.slice(6);
      file.header.push(line);
    } else if (line.startsWith("+")) {
      hunk.lines.push({ kind: "add", old: null, new: newNo++, text: line.slice(1) });
    } else if (line.startsWith("-")) {
      hunk.lines.push({ kind: "del", old: oldNo++, new: null, text: line.slice(1) });
    } else if (line.startsWith(" ")) {
      hunk.lines.push({ kind: "ctx", old: oldNo++, new: newNo++, text: line.slice(1) });
    } else if (line.startsWith("\\")) {
      hunk.lines.push({ kind: "note", old: null, new: null, text: line });
    }
  }
  return { stat, files };
}

function codeCell(line, lang) {
  const sign = { add: "+", del: "-", ctx: " ", note: "" }[line.kind];
  return el("td", { class: "code" }, el("span", { class: "sign" }, sign), ...highlight(line.text, lang));
}

function numCell(n) { return el("td", { class: "ln" }, n === null ? "" : String(n)); }

// A click on a line of the new side opens a comment box under it (when reviewing).
function commentable(row, path, line, review) {
  if (!review || line.new === null) return row;
  row.classList.add("commentable");
  row.dataset.path = path;
  row.dataset.line = String(line.new);
  row.title = "click to comment on this line";
  row.addEventListener("click", () => review.openLineComment(row, path, line.new, line.text));
  return row;
}

// Fixed column widths (a fixed table takes them from its first row, which spans them all).
function columns(kinds) {
  return el("colgroup", {}, ...kinds.map((k) => el("col", { class: `col-${k}` })));
}

function unifiedTable(file, review) {
  const lang = languageOf(file.path);
  const table = el("table", { class: "diff-table unified", "data-file": file.path }, columns(["ln", "ln", "code"]));
  for (const hunk of file.hunks) {
    table.append(el("tr", { class: "hunk" }, el("td", { colspan: 3 }, hunk.header)));
    for (const line of hunk.lines) {
      const row = el("tr", { class: `l-${line.kind}` }, numCell(line.old), numCell(line.new), codeCell(line, lang));
      table.append(commentable(row, file.path, line, review));
    }
  }
  return table;
}

// Side by side: a hunk's deletions beside the additions that replace them.
function splitRows(hunk) {
  const rows = [];
  let dels = [], adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i] || null, adds[i] || null]);
    dels = []; adds = [];
  };
  for (const line of hunk.lines) {
    if (line.kind === "del") dels.push(line);
    else if (line.kind === "add") adds.push(line);
    else { flush(); rows.push([line, line]); }
  }
  flush();
  return rows;
}

function splitTable(file, review) {
  const lang = languageOf(file.path);
  const table = el("table", { class: "diff-table split", "data-file": file.path }, columns(["ln", "code", "ln", "code"]));
  const blank = () => [el("td", { class: "ln" }), el("td", { class: "code empty" })];
  for (const hunk of file.hunks) {
    table.append(el("tr", { class: "hunk" }, el("td", { colspan: 4 }, hunk.header)));
    for (const [left, right] of splitRows(hunk)) {
      const row = el("tr", {},
        ...(left ? [numCell(left.old), codeCell(left, lang)] : blank()),
        ...(right ? [numCell(right.new), codeCell(right, lang)] : blank()));
      if (left) row.children[1].classList.add(`c-${left.kind}`);
      if (right) row.children[3].classList.add(`c-${right.kind}`);
      table.append(right ? commentable(row, file.path, right, review) : row);
    }
  }
  return table;
}

let diffMode = localStorage.getItem("orchardist.diff") || "unified";

function diffBlock(text, review) {
  const parsed = parseDiff(text);
  const box = el("div", { class: "diff-box" });
  const draw = () => {
    const toggle = el("p", { class: "diff-modes" },
      ...["unified", "split"].map((mode) => {
        const b = el("button", { type: "button", class: mode === diffMode ? "on" : "", "data-mode": mode }, mode === "split" ? "side by side" : mode);
        b.addEventListener("click", () => { diffMode = mode; localStorage.setItem("orchardist.diff", mode); draw(); });
        return b;
      }));
    const files = parsed.files.map((f) => el("div", { class: "diff-file" },
      el("div", { class: "diff-path" }, f.path),
      diffMode === "split" ? splitTable(f, review) : unifiedTable(f, review)));
    box.replaceChildren(toggle, el("pre", { class: "diff-stat" }, parsed.stat.join("\n")), ...files);
    if (review) review.showLineComments(box);
  };
  draw();
  return box;
}

// -- tests and transcript -------------------------------------------------------------------

function testsBlock(reports) {
  if (!reports.length) return [];
  const blocks = reports.map((r) => {
    const rows = (outcome, ids) => ids.map((t) => el("tr", { class: `t-${outcome}` }, el("td", {}, outcome), el("td", {}, t)));
    const c = r.counts;
    // Failures and skips in view; the passes folded (a suite can have thousands).
    return el("div", { class: "tests" },
      el("p", { class: "kv" }, `${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped`, r.cut ? " (list cut)" : "", " · ",
        el("code", {}, r.command)),
      el("table", { class: "tests-table" }, ...rows("failed", r.failed), ...rows("skipped", r.skipped)),
      ...(r.passed.length ? [el("details", {}, el("summary", {}, `${r.passed.length} passed`),
        el("table", { class: "tests-table" }, ...rows("passed", r.passed)))] : []));
  });
  return [el("h3", {}, "verify, test by test"), ...blocks];
}

function transcriptBlock(entries) {
  if (!entries.length) return [];
  const items = entries.map((e) => el("div", { class: `tx tx-${e.kind}` },
    el("span", { class: "tx-who" }, e.kind === "tool" ? `tool ${e.who}` : e.kind === "message" ? e.who || "agent" : e.kind),
    el("pre", { class: "tx-text" }, e.text)));
  return [el("details", { class: "transcript", open: "" }, el("summary", {}, `transcript (${entries.length} entries)`), ...items)];
}

// -- the review form --------------------------------------------------------------------------

// The reviewer's draft outlives the page's live re-renders (kept per run and task).
const drafts = new Map();

function reviewDraft(runId, taskId) {
  const key = `${runId}/${taskId}`;
  if (!drafts.has(key)) drafts.set(key, { text: "", lines: [] });
  const draft = drafts.get(key);
  return {
    draft,
    openLineComment(row, path, line, quoted) {
      if (row.nextSibling && row.nextSibling.classList.contains("comment-form")) return;
      const box = el("textarea", { class: "line-comment-text", rows: 2, placeholder: `comment on ${path}:${line}` });
      const add = el("button", { type: "button", class: "line-comment-add" }, "add comment");
      const form = el("tr", { class: "comment-form" }, el("td", { colspan: row.children.length }, box, " ", add));
      add.addEventListener("click", (event) => {
        event.stopPropagation();
        if (!box.value.trim()) return;
        draft.lines.push({ path, line, text: box.value.trim(), quoted });
        form.remove();
        this.showLineComments(row.closest(".diff-box"));
        renderDraftList();
      });
      row.after(form);
      box.focus();
    },
    showLineComments(box) {
      for (const old of box.querySelectorAll("tr.line-comment")) old.remove();
      for (const c of draft.lines) {
        const row = box.querySelector(`tr.commentable[data-path="${CSS.escape(c.path)}"][data-line="${c.line}"]`);
        if (row) row.after(el("tr", { class: "line-comment" }, el("td", { colspan: row.children.length }, `↳ ${c.text}`)));
      }
    },
  };
}

let renderDraftList = () => {};

function reviewForm(runId, taskId, review) {
  const draft = review.draft;
  const text = el("textarea", { id: "review-text", rows: 4, placeholder: "what to change (sent to the agent), or a note" });
  text.value = draft.text;
  text.addEventListener("input", () => { draft.text = text.value; });
  const list = el("ul", { id: "review-lines" });
  renderDraftList = () => list.replaceChildren(...draft.lines.map((c, i) => {
    const drop = el("button", { type: "button", class: "link" }, "remove");
    drop.addEventListener("click", () => { draft.lines.splice(i, 1); renderDraftList(); for (const b of document.querySelectorAll(".diff-box")) review.showLineComments(b); });
    return el("li", {}, `${c.path}:${c.line} `, el("q", {}, c.quoted), ` — ${c.text} `, drop);
  }));
  renderDraftList();
  const note = el("span", { id: "review-note", class: "muted" });
  const decide = async (verdict) => {
    const body = { verdict, text: draft.text, lines: draft.lines.map(({ path, line, text: t }) => ({ path, line, text: t })) };
    const url = `/api/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(taskId)}/review`;
    const response = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "X-Orchardist-Action": "1", "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({}));
    if (response.ok) { draft.text = ""; draft.lines = []; note.textContent = `${verdict}: recorded`; }
    else note.textContent = `refused: ${answer.error || response.status}`;
  };
  const button = (label, verdict) => {
    const b = el("button", { type: "button", id: `review-${verdict}` }, label);
    b.addEventListener("click", () => decide(verdict));
    return b;
  };
  return el("section", { id: "review", class: "review-box" },
    el("h2", {}, "Review"),
    el("p", { class: "muted" }, "Click a line of the diff to comment on it."),
    text, list,
    el("p", {}, button("approve", "approve"), " ", button("request changes", "changes"), " ", button("reject", "reject"), " ", note));
}

// The decisions made on the task so far; one the run has not acted on yet says so.
function reviewHistory(task, resumable) {
  const reviews = task.reviews || [];
  if (!reviews.length) return [];
  const said = { approve: "approved", changes: "asked for changes", reject: "rejected" };
  const items = reviews.map((r) => el("li", { class: `decision ${r.applied_at ? "applied" : "waiting"}`, "data-verdict": r.verdict },
    `${r.who || "someone"} ${said[r.verdict] || r.verdict} (attempt ${r.attempt}, ${fmtTime(r.decided_at)})`,
    r.applied_at ? "" : el("span", { class: "muted" }, " — waiting for the run to act on it"),
    ...(!r.applied_at && resumable ? [" ", actionButton("resume the run", "resume", `/api/runs/${encodeURIComponent(task.run)}/resume`)] : []),
    ...(r.text ? [el("blockquote", {}, r.text)] : []),
    ...r.lines.map((c) => el("div", { class: "muted" }, `${c.path}:${c.line}: ${c.text}`))));
  return [el("h2", {}, "Reviews"), el("ul", { id: "reviews" }, ...items)];
}

// -- the Review page ------------------------------------------------------------------------------

async function showReview() {
  crumbs.replaceChildren(" / review");
  const render = async () => {
    const items = await getJSON("/api/review");
    const head = el("tr", {}, ...["since", "run", "task", "agent", "diff", "verify", "cost"].map((h) => el("th", {}, h)));
    const rows = items.map((r) => el("tr", { "data-run": r.run_id, "data-task": r.task_id },
      el("td", {}, fmtTime(r.since)),
      el("td", {}, el("a", { href: `/runs/${encodeURIComponent(r.run_id)}` }, r.run_id)),
      el("td", { title: r.title }, el("a", { href: `/runs/${encodeURIComponent(r.run_id)}/tasks/${encodeURIComponent(r.task_id)}` }, r.task_id)),
      el("td", {}, `${r.agent} #${r.attempt}`),
      el("td", {}, r.diffstat || "-"),
      el("td", {}, r.verify || "-"),
      el("td", {}, fmtCost(r.cost_usd)),
    ));
    main.replaceChildren(el("h2", {}, "Awaiting review"),
      items.length ? el("table", { id: "review-list" }, head, ...rows) : el("p", { class: "muted", id: "review-empty" }, "nothing awaits review"));
  };
  await render();
  followAll(render);
}
