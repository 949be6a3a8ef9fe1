// raftlock status page: polls this node's JSON API every two seconds. No
// framework, no build step. Values are put in the page with textContent
// only, never as HTML: lock names and owners come from clients.
"use strict";

const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem("raftlock-token") || "";
}

async function getJSON(path) {
  const headers = { "Accept": "application/json" };
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  const resp = await fetch(path, { headers, cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (e) { /* not JSON */ }
  return { status: resp.status, body, node: resp.headers.get("X-Raftlock-Node") };
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function fmtMs(ms) {
  if (ms >= 60000) return (ms / 60000).toFixed(1) + " min";
  if (ms >= 1000) return (ms / 1000).toFixed(1) + " s";
  return ms + " ms";
}

function showError(msg) {
  const e = $("error");
  e.textContent = msg;
  e.hidden = !msg;
}

function errorText(what, r) {
  if (r.status === 401 || r.status === 403) {
    return what + ": " + r.status + " — paste a read-only token below.";
  }
  const detail = r.body && r.body.error ? r.body.error + ": " + (r.body.message || "") : "HTTP " + r.status;
  return what + ": " + detail;
}

// Each member's own applied index and readiness come from
// /v1/cluster/members: this node asks the others, which the browser cannot.
async function pollCluster() {
  const [c, ready, mem] = await Promise.all([getJSON("/v1/cluster"), getJSON("/readyz"), getJSON("/v1/cluster/members")]);
  if (c.node) $("node").textContent = "node " + c.node;
  const isReady = ready.status === 200 && ready.body && ready.body.ready === true;
  $("ready").textContent = isReady ? "yes" : "no";
  $("ready").className = isReady ? "good" : "bad";
  if (c.status !== 200 || !c.body) {
    return errorText("cluster", c);
  }
  const v = c.body;
  $("leader").textContent = v.leader || "none known";
  $("leader").className = v.leader ? "leader" : "bad";
  $("term").textContent = String(v.term);
  $("self").textContent = v.id;
  $("indexes").textContent = v.last_index + " / " + v.commit_index + " / " + v.applied_index;
  const byID = {};
  if (mem.status === 200 && mem.body) {
    for (const m of mem.body.members || []) byID[m.id] = m;
  }
  const rows = (v.nodes || []).map((n) => {
    const m = byID[n.id];
    const tr = document.createElement("tr");
    tr.dataset.node = n.id;
    cell(tr, n.id + (n.id === v.id ? " (this node)" : ""));
    const role = n.leader ? "leader" : (n.voter ? "follower" : "non-voter");
    cell(tr, role, n.leader ? "leader" : "");
    cell(tr, n.raft_addr);
    cell(tr, n.http_addr || "—");
    const known = m && m.reachable;
    cell(tr, known ? String(m.term) : "—", "num").dataset.col = "term";
    cell(tr, known ? String(m.applied_index) : "—", "num").dataset.col = "applied";
    cell(tr, known && m.lag !== undefined ? String(m.lag) : "—", "num").dataset.col = "lag";
    const rd = !m ? "—" : (m.ready ? "yes" : "no");
    const td = cell(tr, rd, !m ? "" : (m.ready ? "good" : "bad"));
    td.dataset.col = "ready";
    if (m && !m.reachable) td.title = m.error || "not reachable";
    return tr;
  });
  fillRows($("nodes"), rows);
  if (mem.status !== 200) return errorText("members", mem);
  return "";
}

// Recent changes: what differs between two successive lock lists. Changes
// that come and go within one poll are not seen; a new token always is.
const MAX_CHANGES = 20;
let seen = null; // name -> {owner, token, value} from the last list, null before the first
let seenPrefix = null;
let seenIndex = -1;
const changes = [];

function noteChanges(prefix, body) {
  if (prefix !== seenPrefix) {
    seen = null;
    seenPrefix = prefix;
    seenIndex = -1;
    changes.length = 0;
  }
  if (body.index === seenIndex) return; // nothing under the prefix changed
  const now = {};
  for (const l of body.locks) now[l.name] = { owner: l.owner, token: l.fencing_token, value: l.value || "" };
  if (seen !== null) {
    const found = [];
    for (const [name, l] of Object.entries(now)) {
      const was = seen[name];
      if (!was || was.token !== l.token) {
        found.push([name, "held by " + (l.owner || "(no owner)") + " (token " + l.token + ")"]);
      } else if (was.value !== l.value) {
        found.push([name, "value changed"]);
      }
    }
    // A truncated list leaves locks out: their absence says nothing.
    if (!body.truncated) {
      for (const name of Object.keys(seen)) {
        if (!(name in now)) found.push([name, "freed"]);
      }
    }
    const at = new Date().toLocaleTimeString();
    for (const [name, what] of found) changes.unshift({ at, name, what, index: body.index });
    changes.length = Math.min(changes.length, MAX_CHANGES);
  }
  seen = now;
  seenIndex = body.index;
  fillRows($("changes"), changes.map((ch) => {
    const tr = document.createElement("tr");
    tr.dataset.change = ch.name;
    cell(tr, ch.at);
    cell(tr, ch.name);
    cell(tr, ch.what);
    cell(tr, String(ch.index), "num");
    return tr;
  }));
}

// Locks are read linearizably, so the leader answers (through this node)
// with each lock's time left and waiters; without a leader the page falls
// back to this node's stale state, which shows neither.
async function pollLocks() {
  const prefix = $("prefix").value;
  const q = new URLSearchParams({ prefix, limit: "200" });
  let r = await getJSON("/v1/locks?" + q.toString());
  let stale = false;
  if (r.status !== 200 && r.status !== 401 && r.status !== 403) {
    q.set("stale", "true");
    r = await getJSON("/v1/locks?" + q.toString());
    stale = true;
  }
  if (r.status !== 200 || !r.body) {
    return errorText("locks", r);
  }
  const rows = r.body.locks.map((l) => {
    const tr = document.createElement("tr");
    tr.dataset.lock = l.name;
    cell(tr, l.name);
    cell(tr, l.owner || "(no owner)");
    cell(tr, String(l.fencing_token), "num");
    const left = l.remaining_ms !== undefined ? fmtMs(l.remaining_ms) + " of " + fmtMs(l.ttl_ms) : "? of " + fmtMs(l.ttl_ms);
    cell(tr, left, "num").dataset.col = "left";
    cell(tr, l.waiters ? String(l.waiters) : (stale ? "?" : "0"), "num").dataset.col = "waiters";
    return tr;
  });
  $("lockmode").textContent = stale ? "No leader answered: this node's own, possibly lagging, state; time left and waiters unknown." : "";
  fillRows($("locks"), rows);
  $("lockcount").textContent = r.body.locks.length + (r.body.truncated ? "+ (first 200 shown)" : "") + " held";
  noteChanges(prefix, r.body);
  return "";
}

let timer = null;
async function poll() {
  clearTimeout(timer);
  try {
    const errs = (await Promise.all([pollCluster(), pollLocks()])).filter((e) => e);
    showError(errs.join(" "));
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    showError("cannot reach the node: " + e);
  }
  document.body.dataset.polled = "1"; // lets tests wait for the first poll
  timer = setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const params = new URLSearchParams(location.search);
  if (params.has("prefix")) $("prefix").value = params.get("prefix");
  $("lockform").addEventListener("submit", (ev) => { ev.preventDefault(); poll(); });
  $("tokenform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("raftlock-token", $("token").value.trim());
    $("token").value = "";
    poll();
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem("raftlock-token"); poll(); });
  poll();
});
