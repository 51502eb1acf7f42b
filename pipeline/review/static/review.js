// DeltaGuard review page: lists recorded flags, shows one transcript, marks each flag.
// Everything comes from the app's JSON API under /review/api; nothing is fetched elsewhere.
"use strict";

const API = "/review/api";
const COLORS = { prompt_injection: "#b3261e", jailbreak: "#8250df", toxicity: "#9a6700", pii: "#0969da", secrets: "#1a7f37" };
const $ = (sel) => document.querySelector(sel);
let selected = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v; // CSSOM: the page's CSP refuses style attributes
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// The key is entered once and kept for this tab; it goes out as the gateway's Bearer header.
async function api(path, options = {}) {
  const key = sessionStorage.getItem("deltaguard-key");
  const headers = { ...(options.headers || {}) };
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(API + path, { ...options, headers });
  if (response.status === 401) {
    $("#key-form").hidden = false;
    throw new Error("an API key is needed: enter it above");
  }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error((body.error && body.error.message) || `HTTP ${response.status}`);
  }
  return response;
}

function showError(err) {
  const box = $("#error");
  box.textContent = err ? String(err.message || err) : "";
  box.hidden = !err;
}

function when(seconds) {
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19);
}

function query() {
  const params = new URLSearchParams();
  const form = new FormData($("#filters"));
  for (const [name, value] of form.entries()) {
    if (!value) continue;
    params.set(name, name === "since" || name === "until" ? String(Date.parse(value) / 1000) : value);
  }
  return params.toString();
}

function fillSelect(select, values) {
  const current = select.value;
  select.replaceChildren(el("option", { value: "" }, "any"), ...values.map((v) => el("option", { value: v }, v)));
  select.value = values.includes(current) ? current : "";
}

function reviewState(row) {
  const marked = row.categories.filter((c) => row.labels[c]);
  return marked.length === row.categories.length ? "reviewed" : marked.length ? "partly" : "-";
}

async function loadList() {
  try {
    const data = await (await api("/conversations?" + query())).json();
    showError(null);
    $("#key-form").hidden = true;
    fillSelect($("[name=category]"), data.categories);
    fillSelect($("[name=tenant]"), data.tenants);
    $("#count").textContent = `${data.conversations.length} of ${data.total} recorded conversations`;
    const rows = data.conversations.map((c) =>
      el(
        "tr",
        { "data-id": c.id, "data-testid": "row", class: c.id === selected ? "selected" : "", onclick: () => openDetail(c.id) },
        el("td", {}, c.id),
        el("td", {}, c.conversation_id),
        el("td", {}, c.tenant ?? "-"),
        el("td", { class: `decision-${c.decision}` }, c.decision),
        el("td", {}, c.categories.join(", ")),
        el("td", {}, c.turns),
        el("td", {}, when(c.updated_at)),
        el("td", { "data-testid": "review-state" }, reviewState(c)),
      ),
    );
    $("#list tbody").replaceChildren(...rows);
  } catch (err) {
    showError(err);
  }
}

// Category scores over the turns: one line per category, the threshold of each flagged one dashed.
function plot(detail) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 640, H = 220, L = 40, R = 10, T = 10, B = 30;
  const turns = detail.turns;
  const x = (i) => L + (turns.length > 1 ? (i * (W - L - R)) / (turns.length - 1) : (W - L - R) / 2);
  const y = (v) => T + (1 - v) * (H - T - B);
  const svg = document.createElementNS(NS, "svg");
  const add = (parent, tag, attrs, text) => {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    parent.append(node);
    return node;
  };
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("class", "plot");
  svg.setAttribute("data-testid", "plot");
  for (const v of [0, 0.5, 1]) {
    add(svg, "line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#d0d7de" });
    add(svg, "text", { x: 4, y: y(v) + 4, "font-size": 11 }, v.toFixed(1));
  }
  turns.forEach((t, i) => add(svg, "text", { x: x(i) - 3, y: H - 10, "font-size": 11 }, t.index));
  const categories = Object.keys(detail.thresholds);
  for (const cat of categories) {
    const color = COLORS[cat] || "#57606a";
    const points = turns.map((t, i) => `${x(i).toFixed(1)},${y(t.category_scores[cat] ?? 0).toFixed(1)}`);
    add(svg, "polyline", { points: points.join(" "), fill: "none", stroke: color, "stroke-width": 2, "data-category": cat });
    turns.forEach((t, i) => {
      const dot = add(svg, "circle", { cx: x(i), cy: y(t.category_scores[cat] ?? 0), r: 3, fill: color, "data-category": cat });
      add(dot, "title", {}, `${cat} turn ${t.index}: ${(t.category_scores[cat] ?? 0).toFixed(3)}`);
    });
    if (detail.categories.includes(cat)) {
      const th = detail.thresholds[cat];
      add(svg, "line", { x1: L, x2: W - R, y1: y(th), y2: y(th), stroke: color, "stroke-dasharray": "5 4", "data-threshold": cat });
    }
  }
  const legend = el("div", { class: "legend" }, ...categories.map((c) => el("span", { style: `color:${COLORS[c] || "#57606a"}` }, `— ${c}`)));
  return el("div", {}, svg, legend);
}

function flagCard(detail, cat) {
  const verdict = detail.labels[cat] ? detail.labels[cat].verdict : null;
  const mark = async (value) => {
    try {
      await api(`/conversations/${detail.id}/labels/${cat}`, {
        method: "PUT",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ verdict: value }),
      });
      await openDetail(detail.id);
      await loadList();
    } catch (err) {
      showError(err);
    }
  };
  const button = (value, text) =>
    el("button", { type: "button", class: verdict === value ? "active" : "", "data-testid": `mark-${value}`, onclick: () => mark(verdict === value ? null : value) }, text);
  return el(
    "div",
    { class: `flag-card label-${verdict || "none"}`, "data-testid": "flag-card", "data-category": cat, "data-verdict": verdict || "" },
    el("strong", {}, cat),
    ` first flagged at turn ${detail.flag_turns[cat] ?? "?"}`,
    el("span", { class: "state", "data-testid": "label-state" }, verdict ? verdict.replace("_", " ") : "unreviewed"),
    button("confirmed", "Confirm"),
    button("false_positive", "False positive"),
  );
}

// Located findings as marks in a text. Ranges count code points (as the API does), so the
// text is split into code points, not UTF-16 units; each range is clamped to the text, and
// overlapping ranges cut the text at every edge: each piece is marked with every finding
// that covers it. Text goes in as text nodes, never as HTML.
function highlighted(text, located, turnIndex) {
  const points = Array.from(text);
  const ranges = located
    .map(({ f, i }) => {
      const start = Math.max(0, Math.min(Number(f.start) || 0, points.length));
      return { f, i, start, end: Math.max(start, Math.min(Number(f.end) || 0, points.length)) };
    })
    .filter((r) => r.end > r.start);
  const edges = [...new Set([0, points.length, ...ranges.flatMap((r) => [r.start, r.end])])].sort((a, b) => a - b);
  const nodes = [];
  for (let k = 0; k + 1 < edges.length; k++) {
    const [lo, hi] = [edges[k], edges[k + 1]];
    for (const r of ranges) if (r.start === lo) nodes.push(el("a", { id: `finding-${turnIndex}-${r.i}`, class: "anchor" }));
    const piece = points.slice(lo, hi).join("");
    const covering = ranges.filter((r) => r.start <= lo && r.end >= hi);
    if (!covering.length) {
      nodes.push(document.createTextNode(piece));
      continue;
    }
    const tip = covering.map((r) => `${r.f.category}${r.f.score != null ? " " + Number(r.f.score).toFixed(3) : ""} (${r.f.kind})`);
    nodes.push(
      el(
        "mark",
        {
          class: `finding${covering.length > 1 ? " overlap" : ""}`,
          title: tip.join("\n"),
          style: `--finding-color:${COLORS[covering[0].f.category] || "#57606a"}`,
          "data-testid": "finding-mark",
          "data-findings": covering.map((r) => r.i).join(","),
          "data-categories": [...new Set(covering.map((r) => r.f.category))].join(","),
        },
        piece,
      ),
    );
  }
  return nodes;
}

function showFinding(turnIndex, i) {
  const turn = document.querySelector(`[data-testid=turn][data-index="${turnIndex}"]`);
  if (!turn) return;
  for (const m of turn.querySelectorAll("mark.finding")) m.classList.toggle("current", m.dataset.findings.split(",").includes(String(i)));
  const first = turn.querySelector(`mark.finding.current`);
  if (first) first.scrollIntoView({ block: "center" });
}

function findingEntry(turn, f, i) {
  const where = f.start != null ? `chars ${f.start}–${f.end}` : "";
  const label = `${f.category}/${f.kind}${f.score != null ? " " + Number(f.score).toFixed(3) : ""}`;
  const head = f.in
    ? el("a", { href: `#finding-${turn.index}-${i}`, "data-testid": "finding-link", "data-finding": i,
        onclick: (e) => { e.preventDefault(); showFinding(turn.index, i); } }, label)
    : el("span", {}, label);
  const notes = [
    f.item != null ? `item ${f.item}` : "",
    f.in === "attachments" ? "in attached files" : "",
    where,
    f.redacted ? "(in the text before redaction: not shown)" : "",
  ].filter(Boolean);
  return el("li", { "data-testid": "finding", "data-finding": i }, head, " ", notes.join(" · "), " ", el("code", {}, f.preview || "-"));
}

function turnView(turn) {
  const located = (n, where) => turn.findings.map((f, i) => ({ f, i })).filter(({ f }) => f.in === where && f.item === n);
  const items = turn.items.map((item, n) => {
    const here = item.source === "input" && !item.text_is_raw ? located(n, "text") : [];
    const files = item.source === "input" ? located(n, "attachments") : [];
    return el(
      "div",
      { class: `item ${item.source}${item.flagged.length ? " flagged" : ""}`, "data-testid": "item", "data-flagged": item.flagged.join(",") },
      el("span", { class: "meta" }, ...item.flagged.map((c) => el("span", { class: "badge" }, c)),
        `${item.source} · ${item.kind}${item.role ? " · " + item.role : ""}`,
        Object.keys(item.scores).length ? " · " + Object.entries(item.scores).map(([c, v]) => `${c} ${v}`).join(", ") : ""),
      ...highlighted(item.text, here, turn.index),
      item.attachments
        ? el("div", { class: "attachments", "data-testid": "attachments" }, el("span", { class: "meta" }, "attached files"),
            ...highlighted(item.attachments, files, turn.index))
        : "",
    );
  });
  const findings = turn.findings.length
    ? el("div", { class: "findings", "data-testid": "findings" }, "findings:",
        el("ol", {}, ...turn.findings.map((f, i) => findingEntry(turn, f, i))))
    : "";
  return el(
    "div",
    { class: "turn", "data-testid": "turn", "data-index": turn.index },
    el("h3", {}, `turn ${turn.index} · ${turn.decision ?? "-"}${turn.flagged_categories.length ? " · " + turn.flagged_categories.join(", ") : ""}`),
    ...items,
    findings,
  );
}

async function openDetail(id) {
  try {
    const detail = await (await api(`/conversations/${id}`)).json();
    selected = id;
    for (const row of document.querySelectorAll("#list tbody tr")) row.classList.toggle("selected", Number(row.dataset.id) === id);
    const pane = $("#detail");
    pane.replaceChildren(
      el("h2", {}, `#${detail.id} · ${detail.conversation_id} · tenant ${detail.tenant ?? "-"} · `,
        el("span", { class: `decision-${detail.decision}` }, detail.decision), detail.redacted ? " · redacted" : ""),
      el("div", { class: "flags", "data-testid": "flags" }, ...detail.categories.map((c) => flagCard(detail, c))),
      plot(detail),
      ...detail.turns.map(turnView),
    );
    pane.hidden = false;
    pane.dataset.id = String(detail.id);
    showError(null);
  } catch (err) {
    showError(err);
  }
}

async function exportReviewed() {
  try {
    const response = await api("/export");
    const url = URL.createObjectURL(await response.blob());
    const link = el("a", { href: url, download: "reviewed.jsonl" });
    document.body.append(link);
    link.click();
    link.remove();
    URL.revokeObjectURL(url);
  } catch (err) {
    showError(err);
  }
}

async function start() {
  $("#filters").addEventListener("submit", (e) => { e.preventDefault(); loadList(); });
  $("#key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("deltaguard-key", $("#key").value);
    $("#key").value = "";
    refresh();
  });
  $("#export").addEventListener("click", exportReviewed);
  await refresh();
  document.body.dataset.ready = "1";
}

async function refresh() {
  try {
    const session = await (await api("/session")).json();
    $("#session").textContent = session.tenant ? `tenant ${session.tenant}` : "all tenants";
  } catch (err) {
    showError(err);
    return;
  }
  await loadList();
}

start();
