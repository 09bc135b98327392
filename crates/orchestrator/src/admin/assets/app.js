// Garrison dashboard: polls the admin JSON API and follows a session over
// SSE. Every server string reaches the DOM through textContent only.
// The sessions table shows one page (/api/session-page): each poll fetches
// that page alone, so the page stays light with thousands of sessions.
"use strict";

const POLL_MS = 1000;
const SEARCH_DEBOUNCE_MS = 250;
const ACTIVE_STAGES = ["claimed", "starting", "running", "finishing"];
const LOG_KEEP = 256 * 1024;

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function age(ms) {
  if (!ms) return "—";
  let s = Math.max(0, Math.floor((Date.now() - ms) / 1000));
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  s %= 60;
  if (m < 60) return m + "m " + s + "s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + "h " + (m % 60) + "m";
  return Math.floor(h / 24) + "d " + (h % 24) + "h";
}

function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + units[i];
}

function resources(s) {
  if (s.cpus === null || s.cpus === undefined) return "—";
  return s.cpus + " vCPU · " + (s.memory_mb / 1024).toFixed(1) + " GiB · " + (s.disk_mb / 1024).toFixed(1) + " GiB disk";
}

function time(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "—";
}

function sessionHref(id) {
  return "#/sessions/" + encodeURIComponent(id);
}

function apiPath(id) {
  return "/api/sessions/" + encodeURIComponent(id);
}

// The admin token (<state-dir>/admin-token): terminating needs it, and so
// does everything on a listener beyond loopback. Asked for when first
// needed, kept for this tab only.
let tokenDeclined = false;

function adminToken(ask) {
  let token = sessionStorage.getItem("garrison-admin-token");
  if (!token && ask && !tokenDeclined) {
    token = (prompt("Garrison's admin token (the contents of <state-dir>/admin-token):") || "").trim();
    if (token) sessionStorage.setItem("garrison-admin-token", token);
    else tokenDeclined = true; // polling must not ask again and again
  }
  return token || null;
}

function withToken(headers, ask) {
  const token = adminToken(ask);
  return token ? { ...headers, authorization: "Bearer " + token } : headers;
}

async function getJSON(url) {
  let res = await fetch(url, { headers: withToken({ accept: "application/json" }, false), cache: "no-store" });
  if (res.status === 401 && adminToken(true)) {
    res = await fetch(url, { headers: withToken({ accept: "application/json" }, false), cache: "no-store" });
  }
  if (res.status === 401) sessionStorage.removeItem("garrison-admin-token");
  if (!res.ok) throw new Error(url + ": HTTP " + res.status);
  return res.json();
}

function setCell(td, text, cls) {
  const t = String(text);
  if (td.textContent !== t) td.textContent = t;
  if (cls !== undefined && td.className !== cls) td.className = cls;
}

function setStage(span, stage) {
  if (span.textContent !== stage) span.textContent = stage;
  const cls = "stage " + stage;
  if (span.className !== cls) span.className = cls;
}

// ---- overview ------------------------------------------------------------

function renderStatus(st) {
  $("acceptor").textContent = st.acceptor_id + " · v" + st.version;
  const ready = $("ready");
  ready.textContent = st.ready ? "ready" : "not ready";
  ready.className = "badge " + (st.ready ? "ok" : "bad");

  const counts = $("counts");
  const order = ["running", "starting", "claimed", "finishing", "suspended", "terminated", "stopped", "vanished", "released", "failed"];
  const keys = order.filter((k) => k in st.counts).concat(Object.keys(st.counts).filter((k) => !order.includes(k)));
  counts.replaceChildren(...keys.map((k) => {
    const c = el("div", "card" + (view.stage === k ? " selected" : ""));
    c.dataset.stage = k;
    c.title = "Show only " + k + " sessions (click again for all)";
    c.append(el("div", "n", count(st.counts[k])), el("div", "l", k));
    c.addEventListener("click", () => setFilter({ stage: view.stage === k ? "" : k }));
    return c;
  }));

  const freshMs = 90 * 1000;
  const body = $("outposts").tBodies[0];
  body.replaceChildren(...st.outposts.map((o) => {
    const tr = el("tr");
    tr.dataset.outpostId = o.outpost_id;
    const fresh = o.queue_synced_at_ms > 0 && Date.now() - o.queue_synced_at_ms < freshMs;
    const health = el("td");
    health.append(el("span", "dot" + (fresh ? " ok" : "")), document.createTextNode(fresh ? "synced" : "stale"));
    tr.append(
      el("td", "id", o.outpost_id),
      health,
      el("td", null, o.backend),
      el("td", "num", o.held),
      el("td", "num", o.max_concurrent),
      el("td", "num", o.pending),
      el("td", null, o.queue_synced_at_ms ? age(o.queue_synced_at_ms) + " ago" : "never"),
      el("td", "num", o.watch_reconnects),
    );
    return tr;
  }));
}

function sessionRow(s) {
  const tr = el("tr");
  tr.dataset.sessionId = s.session_id;
  const idCell = el("td", "id");
  const a = el("a", null, s.session_id);
  a.href = sessionHref(s.session_id);
  idCell.append(a);
  const stageCell = el("td", "stage-cell");
  const stage = el("span", "stage");
  stageCell.append(stage);
  tr.append(idCell, stageCell);
  for (let i = 0; i < 7; i++) tr.append(el("td"));
  tr.addEventListener("click", (ev) => {
    if (ev.target.tagName !== "A") location.hash = sessionHref(s.session_id);
  });
  return tr;
}

function updateRow(tr, s) {
  const c = tr.cells;
  setStage(c[1].firstChild, s.stage);
  setCell(c[2], s.kind);
  setCell(c[3], age(s.claimed_at_ms));
  setCell(c[4], s.backend);
  setCell(c[5], resources(s));
  setCell(c[6], bytes(s.snapshot_bytes), "num");
  setCell(c[7], s.restarts, "num");
  setCell(c[8], s.outpost_id, "id");
  tr.title = s.error ? "error: " + s.error : "";
}

function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

// What the sessions table shows: one page of the filtered sessions.
const view = { offset: 0, limit: 50, stage: "", status: "", q: "" };
// Answers to older requests (a filter changed meanwhile) are dropped.
let pageRequest = 0;

function pageUrl() {
  const p = new URLSearchParams();
  p.set("offset", String(view.offset));
  p.set("limit", String(view.limit));
  if (view.stage) p.set("stage", view.stage);
  if (view.status) p.set("status", view.status);
  if (view.q) p.set("q", view.q);
  return "/api/session-page?" + p.toString();
}

function setFilter(change) {
  Object.assign(view, change);
  if (!("offset" in change)) view.offset = 0;
  $("filter-stage").value = view.stage;
  $("filter-status").value = view.status;
  if ($("filter-q").value.trim() !== view.q) $("filter-q").value = view.q;
  for (const c of $("counts").children) c.classList.toggle("selected", c.dataset.stage === view.stage);
  refreshSessions().catch(showError);
}

async function refreshSessions() {
  const ticket = ++pageRequest;
  const page = await getJSON(pageUrl());
  if (ticket !== pageRequest) return;
  // The page emptied under us (sessions filtered away): show the last one.
  if (page.sessions.length === 0 && page.matched > 0 && view.offset > 0) {
    view.offset = Math.floor((page.matched - 1) / view.limit) * view.limit;
    return refreshSessions();
  }
  renderPage(page);
}

function renderPage(page) {
  renderSessions(page.sessions);
  const total = page.total;
  const active = ACTIVE_STAGES.reduce((n, k) => n + (page.counts[k] || 0), 0);
  const totalText = count(total) + " sessions · " + count(active) + " active";
  if ($("sessions-total").textContent !== totalText) $("sessions-total").textContent = totalText;
  $("sessions-total").dataset.total = total;
  const filtered = view.stage || view.status || view.q;
  const first = page.sessions.length ? page.offset + 1 : 0;
  const last = page.offset + page.sessions.length;
  $("page-range").textContent = page.matched === 0
    ? (filtered ? "No session matches the filter" : "")
    : count(first) + "–" + count(last) + " of " + count(page.matched) + (filtered ? " matching" : "");
  const pages = Math.max(1, Math.ceil(page.matched / view.limit));
  const current = Math.floor(page.offset / view.limit) + 1;
  $("page-number").textContent = "Page " + count(current) + " of " + count(pages);
  $("page-first").disabled = $("page-prev").disabled = page.offset === 0;
  $("page-next").disabled = $("page-last").disabled = last >= page.matched;
  $("pager").dataset.pages = pages;
  const empty = $("sessions-empty");
  empty.textContent = total === 0 ? "No sessions yet. Waiting for the queue…" : "No session matches the filter.";
  empty.hidden = page.sessions.length > 0;
}

function goToPage(which) {
  const pages = Number($("pager").dataset.pages || 1);
  const current = Math.floor(view.offset / view.limit);
  const target = { first: 0, prev: current - 1, next: current + 1, last: pages - 1 }[which];
  setFilter({ offset: Math.max(0, Math.min(target, pages - 1)) * view.limit });
}

function renderSessions(list) {
  const body = $("sessions").tBodies[0];
  const existing = new Map();
  for (const tr of body.rows) existing.set(tr.dataset.sessionId, tr);
  const rows = list.map((s) => {
    const tr = existing.get(s.session_id) || sessionRow(s);
    existing.delete(s.session_id);
    updateRow(tr, s);
    return tr;
  });
  for (const tr of existing.values()) tr.remove();
  // Reorder only when needed, so rows do not flicker.
  rows.forEach((tr, i) => {
    if (body.rows[i] !== tr) body.insertBefore(tr, body.rows[i] || null);
  });
}

// ---- session page --------------------------------------------------------

let current = null; // { id, source, logBytes }

function renderFields(s) {
  const fields = [
    ["Outpost", s.outpost_id],
    ["Kind", s.kind],
    ["Backend", s.backend],
    ["Resources", resources(s)],
    ["Claimed", time(s.claimed_at_ms) + " (" + age(s.claimed_at_ms) + " ago)"],
    ["Running since", s.running_at_ms ? time(s.running_at_ms) : "—"],
    ["Updated", time(s.updated_at_ms)],
    ["Restarts", s.restarts],
    ["Snapshot", bytes(s.snapshot_bytes)],
  ];
  if (s.error) fields.push(["Error", s.error]);
  $("detail-fields").replaceChildren(...fields.map(([k, v]) => {
    const d = el("div");
    d.append(el("dt", null, k), el("dd", null, v));
    return d;
  }));
  setStage($("detail-stage"), s.stage);
  const done = ["suspended", "terminated", "vanished", "failed", "released", "stopped"].includes(s.stage);
  $("terminate").disabled = done || s.stage === "finishing";
}

function addEvent(e) {
  const li = el("li");
  li.dataset.eventId = e.id;
  const head = el("div");
  head.append(el("span", "kind", e.kind), el("span", "at", time(e.at)));
  li.append(head);
  const detail = e.detail && typeof e.detail === "object" && Object.keys(e.detail).length ? JSON.stringify(e.detail) : "";
  if (detail) li.append(el("div", "detail", detail));
  const list = $("events");
  if (!list.querySelector('li[data-event-id="' + Number(e.id) + '"]')) list.append(li);
}

function appendLog(text) {
  const pre = $("log");
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
  let all = pre.textContent + text;
  if (all.length > LOG_KEEP) all = all.slice(all.length - LOG_KEEP);
  pre.textContent = all;
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

function setStream(text, cls) {
  const s = $("stream-state");
  s.textContent = text;
  s.className = "badge small " + (cls || "");
}

function closeSession() {
  if (current && current.source) current.source.close();
  current = null;
}

function openSession(id) {
  if (current && current.id === id) return;
  closeSession();
  current = { id, source: null };
  $("detail-id").textContent = id;
  $("detail-message").textContent = "";
  $("events").replaceChildren();
  $("log").textContent = "";
  $("detail-fields").replaceChildren();
  setStream("connecting", "");
  getJSON(apiPath(id)).then(renderFields).catch((e) => { $("detail-message").textContent = e.message; });

  const source = new EventSource(apiPath(id) + "/stream");
  current.source = source;
  source.addEventListener("open", () => setStream("live", "ok"));
  source.addEventListener("log", (ev) => appendLog(ev.data));
  source.addEventListener("event", (ev) => {
    try { addEvent(JSON.parse(ev.data)); } catch (_) { /* ignore a bad line */ }
  });
  source.addEventListener("stage", (ev) => {
    setStage($("detail-stage"), ev.data);
    $("terminate").disabled = !ACTIVE_STAGES.includes(ev.data) || ev.data === "finishing";
  });
  source.addEventListener("error", () => {
    // The server ends the stream when the session is done; do not reconnect
    // (a reconnect would replay the whole log).
    source.close();
    setStream("ended", "");
  });
}

async function terminate() {
  if (!current) return;
  const id = current.id;
  const keep = $("keep-snapshot").checked;
  if (!confirm("Terminate session " + id + (keep ? " (keeping its snapshot)" : "") + "?")) return;
  $("terminate").disabled = true;
  try {
    const res = await fetch(apiPath(id) + "/terminate", {
      method: "POST",
      headers: withToken({ "content-type": "application/json" }, true),
      body: JSON.stringify({ keep_snapshot: keep }),
    });
    if (res.status === 401) sessionStorage.removeItem("garrison-admin-token");
    const body = await res.json().catch(() => ({}));
    $("detail-message").textContent = res.status === 202 ? "Termination requested." : "Refused: " + (body.error || "HTTP " + res.status);
  } catch (e) {
    $("detail-message").textContent = e.message;
  }
}

// ---- routing and polling -------------------------------------------------

function route() {
  let id = null;
  const h = location.hash;
  if (h.startsWith("#/sessions/")) id = decodeURIComponent(h.slice("#/sessions/".length));
  else if (location.pathname.startsWith("/sessions/") && (h === "" || h === "#")) id = decodeURIComponent(location.pathname.slice("/sessions/".length));
  $("overview").hidden = id !== null;
  $("session-detail").hidden = id === null;
  if (id === null) {
    closeSession();
    refreshSessions().catch(showError);
  } else openSession(id);
}


function showError(e) {
  const b = $("error-banner");
  b.textContent = "Cannot reach Garrison: " + e.message;
  b.hidden = false;
  const ready = $("ready");
  ready.textContent = "unreachable";
  ready.className = "badge bad";
}

// The open session's row, looked up by a search for its id (a bounded
// page, not the whole list).
async function refreshCurrent() {
  const id = current.id;
  if (id.length > 128) return;
  const page = await getJSON("/api/session-page?limit=500&q=" + encodeURIComponent(id));
  const s = page.sessions.find((x) => x.session_id === id);
  if (s && current && current.id === id) renderFields(s);
}

async function poll() {
  try {
    const status = getJSON("/api/status");
    const rows = current ? refreshCurrent() : refreshSessions();
    const [st] = await Promise.all([status, rows]);
    renderStatus(st);
    $("error-banner").hidden = true;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    showError(e);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

function wireControls() {
  $("terminate").addEventListener("click", terminate);
  $("filter-stage").addEventListener("change", (ev) => setFilter({ stage: ev.target.value }));
  $("filter-status").addEventListener("change", (ev) => setFilter({ status: ev.target.value }));
  $("page-size").addEventListener("change", (ev) => setFilter({ limit: Number(ev.target.value) }));
  let typing = null;
  $("filter-q").addEventListener("input", (ev) => {
    clearTimeout(typing);
    typing = setTimeout(() => setFilter({ q: ev.target.value.trim() }), SEARCH_DEBOUNCE_MS);
  });
  for (const which of ["first", "prev", "next", "last"]) {
    $("page-" + which).addEventListener("click", () => goToPage(which));
  }
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  wireControls();
  route();
  poll();
});
