// The outbox console: plain JavaScript, no dependencies. Every value from
// the server is put on the page as text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
const SVG = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs) => {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};

const state = { session: null, tab: "overview", filter: {}, pages: [0], page: 0, next: null, rows: [], selected: new Set(), timer: null, shown: null };

class APIError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  if (method !== "GET" && state.session && state.session.csrf) opts.headers["X-CSRF-Token"] = state.session.csrf;
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (_) { /* not JSON */ }
  if (res.status === 401 && path !== "api/login") {
    showLogin(data && data.error);
    throw new APIError(401, (data && data.error) || "not authenticated");
  }
  if (!res.ok) throw new APIError(res.status, (data && data.error) || res.statusText);
  return data;
}

function toast(msg, bad) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, bad ? 8000 : 4000);
}

// Formatting.
const nf = new Intl.NumberFormat();
const num = (n) => (n == null ? "–" : nf.format(n));
const rateFmt = (r) => (r == null ? "–" : r >= 100 ? nf.format(Math.round(r)) : r.toFixed(r >= 10 ? 1 : 2));
function dur(s) {
  if (s == null) return "–";
  if (s < 1) return s === 0 ? "0s" : s.toFixed(2) + "s";
  if (s < 60) return Math.round(s) + "s";
  const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
  if (m < 60) return m + "m " + String(Math.round(s % 60)).padStart(2, "0") + "s";
  if (h < 24) return h + "h " + String(m % 60).padStart(2, "0") + "m";
  return d + "d " + (h % 24) + "h";
}
const pad = (n) => String(n).padStart(2, "0");
function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
function clock(iso) {
  const d = new Date(iso);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Start-up and login.
async function boot() {
  try {
    state.session = await api("GET", "api/session");
  } catch (e) {
    if (e.status !== 401) toast(e.message, true);
    return;
  }
  showApp();
}

function showLogin(msg) {
  stopPolling();
  state.session = null;
  for (const id of ["#tabs", "#who", "#overview", "#dead", "#groups", "#detail"]) $(id).hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = msg && !/log in with a token/.test(msg) ? msg : "";
  $("#token").focus();
}

async function login(ev) {
  ev.preventDefault();
  $("#login-error").textContent = "";
  try {
    state.session = await api("POST", "api/login", { token: $("#token").value });
    $("#token").value = "";
    showApp();
  } catch (e) {
    $("#login-error").textContent = e.status === 401 ? "Wrong token." : e.message;
  }
}

function showApp() {
  const s = state.session;
  $("#login").hidden = true;
  $("#tabs").hidden = false;
  $("#who").hidden = false;
  $("#table").textContent = `${s.table} · ${s.dialect}`;
  $("#mode").textContent = s.writable ? "writable" : "read-only";
  $("#mode").className = s.writable ? "chip rw" : "chip ro";
  $("#user").textContent = s.user;
  $("#logout").hidden = !s.logout;
  for (const w of document.querySelectorAll(".writes")) w.hidden = !s.writable;
  const tab = (location.hash || "#overview").slice(1);
  show(["overview", "dead", "groups"].includes(tab) ? tab : "overview");
}

async function logout() {
  try { await api("POST", "api/logout", {}); } catch (_) { /* shown */ }
  showLogin();
}

// Tabs.
function show(tab) {
  state.tab = tab;
  history.replaceState(null, "", "#" + tab);
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const id of ["overview", "dead", "groups"]) $("#" + id).hidden = id !== tab;
  stopPolling();
  if (tab === "overview") { loadBacklog(); state.timer = setInterval(loadBacklog, 5000); }
  if (tab === "dead") loadDead();
  if (tab === "groups") loadGroups();
}
function stopPolling() { clearInterval(state.timer); state.timer = null; }

// Overview.
async function loadBacklog() {
  let b;
  try { b = await api("GET", "api/backlog"); } catch (e) { if (e.status !== 401) toast(e.message, true); return; }
  const n = b.now || {};
  $("#s-pending").textContent = num(n.pending);
  $("#s-oldest").textContent = n.pending ? dur(n.oldest_seconds) : "–";
  $("#s-sent").textContent = rateFmt(n.sent_per_second);
  $("#s-deadrate").textContent = rateFmt(n.dead_per_second);
  $("#s-dead").textContent = num(n.dead);
  $("#s-dead").parentElement.classList.toggle("alert", (n.dead || 0) > 0);
  $("#rates-note").textContent = b.rates === "estimate" ? "(sent estimated from the ids written; no relay in this process)" : "";
  chart($("#c-pending"), b.series, [{ key: "pending", cls: "pending", area: true }], $("#a-pending"));
  chart($("#c-rates"), b.series, [{ key: "sent_per_second", cls: "sent" }, { key: "dead_per_second", cls: "deadl" }], $("#a-rates"));
  const tbody = $("#topics tbody");
  tbody.replaceChildren();
  for (const t of b.topics) {
    const spark = svgEl("svg", { class: "spark", viewBox: "0 0 140 24", preserveAspectRatio: "none" });
    spark.append(svgEl("path", { d: pathOf(t.series, "pending", 140, 24, maxOf(t.series, ["pending"])) }));
    tbody.append(el("tr", {},
      el("td", { class: "mono", text: t.topic }),
      el("td", { class: "num", text: num(t.now.pending) }),
      el("td", { class: "num", text: t.now.pending ? dur(t.now.oldest_seconds) : "–" }),
      el("td", { class: "num", text: rateFmt(t.now.sent_per_second) }),
      el("td", { class: "num", text: rateFmt(t.now.dead_per_second) }),
      el("td", { class: "num", text: num(t.now.dead) }),
      el("td", {}, spark)));
  }
  $("#topics-empty").hidden = b.topics.length > 0;
}

function maxOf(series, keys) {
  let m = 0;
  for (const p of series) for (const k of keys) if (p[k] != null) m = Math.max(m, p[k]);
  return m;
}

// pathOf draws series[key] across w×h, leaving gaps where a value is missing.
function pathOf(series, key, w, h, top) {
  const n = series.length;
  if (n === 0) return "";
  const scale = top > 0 ? top * 1.1 : 1;
  let d = "", pen = false;
  series.forEach((p, i) => {
    const v = p[key];
    if (v == null) { pen = false; return; }
    const x = n === 1 ? w : (i / (n - 1)) * w;
    const y = h - (v / scale) * (h - 4) - 2;
    d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
    pen = true;
  });
  return d;
}

function chart(svg, series, lines, axis) {
  const w = 600, h = 180;
  svg.replaceChildren();
  const top = maxOf(series, lines.map((l) => l.key));
  for (let i = 1; i < 4; i++) svg.append(svgEl("line", { class: "grid-line", x1: 0, x2: w, y1: (h * i) / 4, y2: (h * i) / 4 }));
  for (const l of lines) {
    const d = pathOf(series, l.key, w, h, top);
    if (l.area && d && d.lastIndexOf("M") === 0) {
      // The area under the line, closed along the bottom edge.
      const xs = [...d.matchAll(/[ML]([\d.]+)/g)].map((m) => m[1]);
      svg.append(svgEl("path", { class: "area " + l.cls, d: `${d}L${xs[xs.length - 1]} ${h}L${xs[0]} ${h}Z` }));
    }
    svg.append(svgEl("path", { class: "line " + l.cls, d }));
  }
  const label = svgEl("text", { x: 6, y: 14 });
  label.textContent = "max " + (lines[0].key === "pending" ? num(Math.round(top * 1.1)) : rateFmt(top * 1.1) + "/s");
  svg.append(label);
  axis.replaceChildren(el("span", { text: series.length ? clock(series[0].t) : "" }),
    el("span", { text: series.length ? `${series.length} samples` : "no samples yet" }),
    el("span", { text: series.length ? clock(series[series.length - 1].t) : "" }));
}

// Dead letters.
function readFilter() {
  const f = {};
  for (const k of ["msg_id", "topic", "key", "error"]) {
    const v = $("#f-" + k).value.trim();
    if (v) f[k] = v;
  }
  for (const k of ["from", "until"]) {
    const v = $("#f-" + k).value;
    if (v) f[k] = new Date(v).toISOString();
  }
  return f;
}
const qs = (f, extra = {}) => new URLSearchParams({ ...f, ...extra }).toString();
function describe(f) {
  const parts = Object.entries(f).map(([k, v]) => `${k}=${v}`);
  return parts.length ? "matching " + parts.join(", ") : "(no filter: every DEAD message)";
}

async function loadDead() {
  const after = state.pages[state.page];
  let page;
  try {
    page = await api("GET", "api/dead?" + qs(state.filter, { after_id: after, limit: 50 }));
  } catch (e) { if (e.status !== 401) toast(e.message, true); return; }
  state.rows = page.messages;
  state.next = page.next_after_id ?? null;
  state.selected.clear();
  const tbody = $("#dead-table tbody");
  tbody.replaceChildren();
  for (const m of page.messages) {
    const box = el("input", { type: "checkbox", "aria-label": "select " + m.msg_id });
    box.addEventListener("click", (ev) => ev.stopPropagation());
    box.addEventListener("change", () => { box.checked ? state.selected.add(m.msg_id) : state.selected.delete(m.msg_id); tr.classList.toggle("selected", box.checked); selInfo(); });
    const tr = el("tr", { class: "clickable", "data-msg-id": m.msg_id },
      el("td", { class: "check" }, box),
      el("td", { class: "num", text: m.id }),
      el("td", { class: "mono", text: m.msg_id }),
      el("td", { text: m.topic }),
      el("td", { class: "mono", text: m.key || "" }),
      el("td", { class: "num", text: m.retries }),
      el("td", { text: when(m.dead_at), title: m.dead_at || "" }),
      el("td", { class: "err", text: m.last_error || "", title: m.last_error || "" }));
    tr.addEventListener("click", () => openMessage(m.msg_id));
    tbody.append(tr);
  }
  $("#dead-empty").hidden = page.messages.length > 0;
  $("#check-all").checked = false;
  $("#next-page").disabled = state.next == null;
  $("#first-page").disabled = state.page === 0;
  selInfo();
  $("#dead-table").dataset.loads = String(++loads.dead);
}
const loads = { dead: 0, groups: 0 };

function selInfo() {
  const n = state.selected.size;
  $("#selinfo").textContent = `${n} selected · page ${state.page + 1}`;
  $("#retry-sel").disabled = n === 0;
  $("#drop-sel").disabled = n === 0;
}

function search(ev) {
  if (ev) ev.preventDefault();
  state.filter = readFilter();
  state.pages = [0];
  state.page = 0;
  loadDead();
}

// confirmBox asks a yes or no question in the page's dialog.
function confirmBox(title, text, detail, okLabel, danger) {
  const d = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").textContent = text;
  $("#confirm-detail").textContent = detail || "";
  const ok = $("#confirm-ok");
  ok.textContent = okLabel;
  ok.className = danger ? "primary danger-fill" : "primary";
  return new Promise((resolve) => {
    const done = (v) => { d.close(); ok.onclick = null; $("#confirm-cancel").onclick = null; resolve(v); };
    ok.onclick = () => done(true);
    $("#confirm-cancel").onclick = () => done(false);
    d.oncancel = () => resolve(false);
    d.showModal();
  });
}

const verbs = { retry: ["Retry", "retried", "They become NEW and the relay publishes them again with a fresh retry budget."], drop: ["Drop", "dropped", "They are deleted for good."] };

async function act(verb, body) {
  try {
    const r = await api("POST", "api/dead/" + verb, body);
    const n = verb === "retry" ? r.retried : r.dropped;
    toast(`${num(n || 0)} DEAD ${n === 1 ? "message" : "messages"} ${verbs[verb][1]}.`);
  } catch (e) {
    if (e.status !== 401) toast(e.message, true);
  }
}

async function actSelected(verb) {
  const ids = [...state.selected];
  const [V, , what] = verbs[verb];
  if (!(await confirmBox(`${V} ${ids.length} selected`, `${V} ${ids.length} selected DEAD ${ids.length === 1 ? "message" : "messages"}?`, what, V, verb === "drop"))) return;
  await act(verb, { msg_ids: ids });
  loadDead();
}

async function actMatching(verb) {
  const f = state.filter;
  let c;
  try { c = await api("GET", "api/dead/count?" + qs(f)); } catch (e) { if (e.status !== 401) toast(e.message, true); return; }
  const [V, , what] = verbs[verb];
  if (c.count === 0) { toast("No DEAD messages match."); return; }
  const text = `${V} ${num(c.count)} DEAD ${c.count === 1 ? "message" : "messages"} ${describe(f)}?` + (c.more ? ` More match: this touches the oldest ${num(c.count)}; run it again for the rest.` : "");
  const detail = `${what} Only these rows are touched (id ≤ ${c.max_id}, dead at or before ${when(c.dead_until)}); messages that go DEAD meanwhile are left alone.`;
  if (!(await confirmBox(`${V} all matching`, text, detail, `${V} ${num(c.count)}`, verb === "drop"))) return;
  await act(verb, { filter: f, max_id: c.max_id, dead_until: c.dead_until, expect: c.count });
  loadDead();
}

// The message drawer.
async function openMessage(msgId) {
  let m;
  try { m = await api("GET", "api/message?" + qs({ msg_id: msgId })); } catch (e) { if (e.status !== 401) toast(e.message, true); return; }
  state.shown = m;
  $("#d-title").textContent = m.msg_id;
  const dl = $("#d-fields");
  dl.replaceChildren();
  const status = el("span", { class: "status " + m.status, text: m.status });
  const rows = [["id", m.id], ["status", status], ["topic", m.topic], ["key", m.key || "–"], ["retries", m.retries],
    ["created", when(m.created_at)], ["dead at", when(m.dead_at)], ["sent at", when(m.sent_at)]];
  for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", {}, v instanceof Node ? v : String(v)));
  const hist = $("#d-history");
  hist.replaceChildren();
  for (const h of m.history) hist.append(el("li", { class: h.what, text: h.text }));
  if (!m.history.length) hist.append(el("li", { class: "retried", text: "no error recorded" }));
  const hb = $("#d-headers tbody");
  hb.replaceChildren();
  const headers = Object.entries(m.headers || {}).sort(([a], [b]) => (a < b ? -1 : 1));
  for (const [k, v] of headers) hb.append(el("tr", {}, el("td", { text: k }), el("td", { text: v })));
  if (!headers.length) hb.append(el("tr", {}, el("td", { class: "muted", text: "no headers" })));
  $("#d-payload").textContent = m.payload === undefined ? "" : JSON.stringify(m.payload, null, 2);
  for (const b of ["#d-retry", "#d-drop"]) $(b).disabled = m.status !== "DEAD";
  $("#detail").hidden = false;
}

async function actShown(verb) {
  const m = state.shown;
  const [V, , what] = verbs[verb];
  if (!(await confirmBox(`${V} ${m.msg_id}`, `${V} the DEAD message ${m.msg_id}?`, what, V, verb === "drop"))) return;
  await act(verb, { msg_ids: [m.msg_id] });
  $("#detail").hidden = true;
  if (state.tab === "dead") loadDead();
}

// Failure groups.
async function loadGroups() {
  let g;
  try { g = await api("GET", "api/groups"); } catch (e) { if (e.status !== 401) toast(e.message, true); return; }
  $("#groups-info").textContent = `${num(g.groups.length)} ${g.groups.length === 1 ? "group" : "groups"} of ${num(g.scanned)} DEAD messages` +
    (g.truncated ? ` (the oldest ${num(g.scanned)} only)` : "");
  const tbody = $("#groups-table tbody");
  tbody.replaceChildren();
  for (const grp of g.groups) {
    const actions = el("td", { class: "writes-col" });
    if (state.session.writable) {
      actions.append(el("button", { type: "button", text: "Retry", onclick: () => actGroup("retry", grp, g) }), " ",
        el("button", { type: "button", class: "danger", text: "Drop", onclick: () => actGroup("drop", grp, g) }));
    }
    tbody.append(el("tr", { "data-signature": grp.label },
      el("td", { class: "num", text: num(grp.count) }),
      el("td", { class: "err", text: grp.sample, title: grp.label }),
      el("td", { text: grp.topics.join(", ") + (grp.more_topics ? ", …" : "") }),
      el("td", { text: when(grp.first_dead_at) }),
      el("td", { text: when(grp.last_dead_at) }),
      actions));
  }
  $("#groups-empty").hidden = g.groups.length > 0;
  $("#groups-table").dataset.loads = String(++loads.groups);
}

async function actGroup(verb, grp, g) {
  const [V, , what] = verbs[verb];
  const text = `${V} the ${num(grp.count)} DEAD ${grp.count === 1 ? "message" : "messages"} that failed with “${grp.label}”?`;
  const detail = `${what} Only the rows grouped here are touched (id ≤ ${g.max_id}); messages that go DEAD meanwhile are left alone.`;
  if (!(await confirmBox(`${V} failure group`, text, detail, `${V} ${num(grp.count)}`, verb === "drop"))) return;
  await act(verb, { group: grp.signature, max_id: g.max_id, dead_until: g.dead_until, expect: grp.count });
  loadGroups();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", logout);
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => show(b.dataset.tab));
  $("#filter").addEventListener("submit", search);
  $("#clear").addEventListener("click", () => { $("#filter").reset(); search(); });
  $("#next-page").addEventListener("click", () => { state.pages[state.page + 1] = state.next; state.page++; loadDead(); });
  $("#first-page").addEventListener("click", () => { state.page = 0; loadDead(); });
  $("#check-all").addEventListener("change", (ev) => {
    for (const box of document.querySelectorAll("#dead-table tbody input[type=checkbox]")) {
      if (box.checked !== ev.target.checked) { box.checked = ev.target.checked; box.dispatchEvent(new Event("change")); }
    }
  });
  $("#retry-sel").addEventListener("click", () => actSelected("retry"));
  $("#drop-sel").addEventListener("click", () => actSelected("drop"));
  $("#retry-all").addEventListener("click", () => actMatching("retry"));
  $("#drop-all").addEventListener("click", () => actMatching("drop"));
  $("#d-close").addEventListener("click", () => { $("#detail").hidden = true; });
  $("#d-retry").addEventListener("click", () => actShown("retry"));
  $("#d-drop").addEventListener("click", () => actShown("drop"));
  $("#groups-refresh").addEventListener("click", loadGroups);
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") $("#detail").hidden = true; });
  boot();
});
