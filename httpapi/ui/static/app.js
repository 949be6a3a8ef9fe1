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

async function pollCluster() {
  const [c, ready] = await Promise.all([getJSON("/v1/cluster"), getJSON("/readyz")]);
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
  const rows = (v.nodes || []).map((n) => {
    const tr = document.createElement("tr");
    tr.dataset.node = n.id;
    cell(tr, n.id + (n.id === v.id ? " (this node)" : ""));
    const role = n.leader ? "leader" : (n.voter ? "follower" : "non-voter");
    cell(tr, role, n.leader ? "leader" : "");
    cell(tr, n.raft_addr);
    cell(tr, n.http_addr || "—");
    cell(tr, n.id === v.id ? String(v.applied_index) : "—", "num");
    cell(tr, n.id === v.id ? (isReady ? "yes" : "no") : "—", n.id === v.id ? (isReady ? "good" : "bad") : "");
    return tr;
  });
  fillRows($("nodes"), rows);
  return "";
}

async function pollLocks() {
  const prefix = $("prefix").value;
  const q = new URLSearchParams({ prefix, limit: "200", stale: "true" });
  const r = await getJSON("/v1/locks?" + q.toString());
  if (r.status !== 200 || !r.body) {
    return errorText("locks", r);
  }
  const rows = r.body.locks.map((l) => {
    const tr = document.createElement("tr");
    tr.dataset.lock = l.name;
    cell(tr, l.name);
    cell(tr, l.owner || "(no owner)");
    cell(tr, String(l.fencing_token), "num");
    cell(tr, fmtMs(l.ttl_ms), "num");
    return tr;
  });
  fillRows($("locks"), rows);
  $("lockcount").textContent = r.body.locks.length + (r.body.truncated ? "+ (first 200 shown)" : "") + " held";
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
