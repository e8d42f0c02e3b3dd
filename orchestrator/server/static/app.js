// The watch page: one thread, its events from the WebSocket, a few controls.
// Plain DOM, no build step. Every string from the server goes in via
// textContent, never innerHTML.
"use strict";

const $ = (id) => document.getElementById(id);
// The built-in event types, from the server's event schema (GET /schema/events: its discriminator's
// mapping); any other type is a tool's own event, listed under "custom events". Event data is read
// only as that schema describes it.
let BUILTIN_EVENTS = new Set();
const eventTypesReady = fetch("/schema/events").then((res) => res.json())
  .then((schema) => { BUILTIN_EVENTS = new Set(Object.keys(schema.discriminator.mapping)); })
  .catch(() => {});
const INLINE_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

const view = { threadId: null, agentType: null, lastSeq: 0, ws: null, streaming: {}, toolCards: {},
  sideSteps: { a: 0, b: 0 }, running: false, retry: 0 };

function token() { return $("token").value.trim(); }

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = data.error || { message: res.statusText };
    showError(`${err.message}${err.code ? " (" + err.code + ")" : ""}`);
    throw new Error(err.message);
  }
  showError(null);
  return data;
}

function showError(text) {
  $("error").hidden = !text;
  $("error").textContent = text || "";
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function append(node) {
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  box.appendChild(node);
  if (atBottom) box.scrollTop = box.scrollHeight;
}

// -- messages ---------------------------------------------------------------

function sideName(side) { return $(side === "a" ? "side-a-name" : "side-b-name").textContent; }

function bubble(side, text, extra, before) {
  const node = el("div", `msg ${side ? "side-" + side : "injected"} ${extra || ""}`.trim());
  node.appendChild(el("span", "who", side ? sideName(side) : "injected"));
  node.appendChild(el("span", "text", text));
  if (before) before.parentNode.insertBefore(node, before); else append(node);
  return node;
}

// The first card of a message's tool calls already on the page: a message whose text
// did not stream here (a replay has no text deltas) goes above its calls, as it did live.
function firstCardOf(m) {
  for (const call of m.tool_calls || []) if (view.toolCards[call.id]) return view.toolCards[call.id];
  return null;
}

function onDelta(data) {
  if (data.depth > 0) return;
  let node = view.streaming[data.side];
  if (!node) node = view.streaming[data.side] = bubble(data.side, "", "streaming");
  node.querySelector(".text").textContent += data.text;
}

// A typed answer (a prompt's output=) shows its validated value as an indented object, not the raw JSON line.
function typedValue(m) {
  const meta = m.metadata || {};
  return m.role === "assistant" && Object.prototype.hasOwnProperty.call(meta, "output") ? meta.output : undefined;
}

function messageText(m) {
  const value = typedValue(m);
  return value === undefined ? (m.content || "") : JSON.stringify(value, null, 2);
}

function onMessage(m) {
  if (m.role === "tool") return;  // shown on its tool card
  const side = m.side;
  const streaming = side ? view.streaming[side] : null;
  const typed = typedValue(m) !== undefined;
  if (streaming && m.depth === 0 && m.role === "assistant") {
    delete view.streaming[side];
    if (m.content) {
      streaming.querySelector(".text").textContent = messageText(m);
      streaming.classList.remove("streaming");
      forkable(streaming, m);
      if (typed) streaming.classList.add("typed");
    } else {
      streaming.remove();
    }
    return;
  }
  if (!m.content && !(m.attachments || []).length) return;
  const extra = (m.depth > 0 ? "nested" : "") + (m.silent ? " silent" : "") + (typed ? " typed" : "");
  const node = bubble(side, messageText(m), extra, firstCardOf(m));
  forkable(node, m);
  showFiles(node, m.attachments);
}

// -- time travel: "fork from here" on each message, and the thread's fork tree --

function forkable(node, m) {
  node.dataset.seq = m.seq;
  if (m.depth > 0) return;  // a nested prompt's message is inside its caller's step
  const button = el("button", "fork small", "fork from here");
  button.type = "button";
  button.title = `A new thread with this one's history up to message ${m.seq}`;
  button.addEventListener("click", () => forkAt(m.seq));
  node.appendChild(button);
}

async function forkAt(seq) {
  const fork = await api("POST", `/threads/${encodeURIComponent(view.threadId)}/fork`, { at: seq }).catch(() => null);
  if (!fork) return;  // api() showed the error (a point inside a step names the nearest valid ones)
  await openThread(fork.id);
  loadThreads();
}

async function loadTree(threadId) {
  const tree = await api("GET", `/threads/${encodeURIComponent(threadId)}/tree`).catch(() => null);
  if (!tree || view.threadId !== threadId) return;
  const items = {};
  const root = el("ol", "fork-tree");
  for (const t of tree.threads) {
    const item = el("li");
    const button = el("button", "thread small", t.forked_from ? `${t.id.slice(0, 12)}… at ${t.forked_at}` : t.id.slice(0, 12) + "…");
    button.type = "button";
    button.dataset.id = t.id;
    if (t.id === threadId) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => openThread(t.id).catch(() => {}));
    item.appendChild(button);
    items[t.id] = item;
    const parent = t.forked_from && items[t.forked_from];
    if (parent) {
      let list = parent.querySelector("ol");
      if (!list) parent.appendChild(list = el("ol"));
      list.appendChild(item);
    } else {
      root.appendChild(item);
    }
  }
  $("fork-tree").replaceChildren(root);
  $("fork-tree-section").hidden = tree.threads.length < 2;
}

// -- attachments: images inline, other files as links (fetched with the token) --

async function fileBlob(url) {
  const headers = token() ? { "Authorization": "Bearer " + token() } : {};
  const res = await fetch(url, { headers });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return res.blob();
}

function fileUrl(ref) {
  return `/threads/${encodeURIComponent(view.threadId)}/files/${encodeURIComponent(ref.id)}`;
}

function showFiles(node, refs) {
  if (!refs || !refs.length || node.querySelector(".files")) return;
  const box = el("div", "files");
  for (const ref of refs) {
    const label = `${ref.name} (${ref.mime_type}, ${ref.size} bytes)`;
    if (INLINE_IMAGES.has(ref.mime_type)) {
      const img = el("img");
      img.alt = label;
      img.title = label;
      fileBlob(fileUrl(ref)).then((blob) => { img.src = URL.createObjectURL(blob); }).catch(() => { img.alt = label + " (unavailable)"; });
      box.appendChild(img);
    } else {
      const link = el("a", "file", label);
      link.href = fileUrl(ref);
      link.download = ref.name;
      link.addEventListener("click", (e) => {
        e.preventDefault();
        fileBlob(fileUrl(ref)).then((blob) => {
          const a = el("a");
          a.href = URL.createObjectURL(blob);
          a.download = ref.name;
          a.click();
          setTimeout(() => URL.revokeObjectURL(a.href), 10000);
        }).catch((err) => showError(err.message));
      });
      box.appendChild(link);
    }
  }
  node.appendChild(box);
}

// -- tool calls -------------------------------------------------------------

function onToolStarted(d) {
  if (view.toolCards[d.id]) return;
  const card = el("div", `tool-call side-${d.side || "a"}`);
  card.dataset.name = d.name;
  card.dataset.callId = d.id;
  card.appendChild(el("span", "icon", "tool"));
  card.appendChild(el("span", "name", d.name));
  if (d.progress_argument) card.appendChild(el("span", "progress", `${d.progress_argument}: ${d.progress_value ?? "…"}`));
  card.appendChild(el("span", "state", "running…"));
  view.toolCards[d.id] = card;
  // the streaming text of the same response stays above the card
  append(card);
}

function onToolResult(m) {
  let card = view.toolCards[m.tool_call_id];
  if (!card) { onToolStarted({ id: m.tool_call_id, name: m.name, side: m.side }); card = view.toolCards[m.tool_call_id]; }
  card.classList.add(m.tool_status === "error" ? "error" : "success");
  card.querySelector(".state").textContent = m.tool_status === "error" ? "✗ error" : "✓ done";
  if (!card.querySelector(".result")) card.appendChild(el("span", "result", m.content || ""));
  showFiles(card, m.attachments);
}

// A call a tool made with invoke_tool: a card inside the calling tool's card.
function onInvoked(d) {
  if (view.toolCards[d.id]) return;
  const parent = view.toolCards[d.parent_id];
  const card = el("div", `tool-call invoked side-${d.side || "a"}`);
  card.dataset.name = d.name;
  card.dataset.callId = d.id;
  card.appendChild(el("span", "icon invoked", "invoked"));
  card.appendChild(el("span", "name", d.name));
  card.appendChild(el("span", "state", "running…"));
  view.toolCards[d.id] = card;
  if (!parent) { append(card); return; }
  let box = parent.querySelector(":scope > .nested-calls");
  if (!box) { box = el("div", "nested-calls"); parent.appendChild(box); }
  box.appendChild(card);
}

function onInvokedResult(d) {
  if (!view.toolCards[d.id]) onInvoked(d);
  const card = view.toolCards[d.id];
  card.classList.add(d.tool_status === "error" ? "error" : "success");
  card.querySelector(".state").textContent = d.tool_status === "error" ? "✗ error" : "✓ done";
  if (!card.querySelector(":scope > .result")) card.appendChild(el("span", "result", d.content || ""));
}

// -- counters, status, logs ---------------------------------------------------

function setCounters(snapshot) {
  if (!snapshot) return;
  $("step-count").textContent = snapshot.step_count;
  $("side-a-steps").textContent = snapshot.side_a_step_count;
  $("side-b-steps").textContent = snapshot.side_b_step_count;
  $("turn-count").textContent = snapshot.turn_count;
  view.sideSteps = { a: snapshot.side_a_step_count, b: snapshot.side_b_step_count };
}

function setRunning(running, status) {
  view.running = running;
  $("status").textContent = status;
  $("stop").disabled = !running;
  $("run").disabled = running || view.agentType !== "dual_ai";
  $("force-a").disabled = $("force-b").disabled = !view.threadId;
  $("send").disabled = running;
}

// One line per event (seq, type, a short summary); open it for the whole JSON.
function log(listId, ev, detail) {
  const item = el("li");
  const details = el("details");
  const summary = el("summary");
  summary.appendChild(el("span", "seq", `#${ev.seq}`));
  summary.appendChild(el("span", "type", ev.type));
  if (detail) { summary.appendChild(document.createTextNode(" · ")); summary.appendChild(el("code", null, detail)); }
  details.appendChild(summary);
  details.appendChild(el("pre", null, JSON.stringify(ev.data, null, 2)));
  item.appendChild(details);
  const list = $(listId);
  list.appendChild(item);
  while (list.children.length > 200) list.removeChild(list.firstChild);
  list.scrollTop = list.scrollHeight;
}

function setUsage(usage) {
  if (!usage) { $("usage").textContent = "–"; return; }
  $("usage").textContent = `${usage.input_tokens} in / ${usage.output_tokens} out tokens · ` +
    `${usage.requests} requests · $${Number(usage.cost || 0).toFixed(6)} (thread total)`;
}

async function refreshUsage() {
  if (!view.threadId) return;
  const thread = await api("GET", `/threads/${encodeURIComponent(view.threadId)}`).catch(() => null);
  if (thread) setUsage(thread.usage);
}

function brief(data) {
  if (data === null || data === undefined) return "";
  const text = typeof data === "string" ? data : JSON.stringify(data);
  return text.length > 160 ? text.slice(0, 157) + "…" : text;
}

// -- calls waiting for the outside (GET /threads/{id}/waiting; POST .../calls/{call}/approve|reject|result|answer) --
// An approval is approved or rejected; a deferred call gets its result; a tool's question (`state.ask`) its answer.

async function loadWaiting() {
  const id = view.threadId;
  if (!id) return;
  const { calls } = await api("GET", `/threads/${encodeURIComponent(id)}/waiting`).catch(() => ({ calls: [] }));
  if (id !== view.threadId) return;  // another thread was opened meanwhile
  $("waiting").replaceChildren(...calls.map(waitingCard));
  $("waiting-section").hidden = $("waiting").children.length === 0;
}

function waitingCard(call) {
  const item = el("li", `waiting-call kind-${call.kind} side-${call.side}`);
  item.dataset.callId = call.call_id;
  item.dataset.kind = call.kind;
  item.appendChild(el("span", "name", call.tool));
  item.appendChild(el("pre", "arguments", JSON.stringify(call.arguments, null, 2)));
  if (call.kind === "approval") item.append(...approvalControls(call));
  else if (call.kind === "result") item.append(...resultControls(call));
  else item.append(...answerControls(call));
  return item;
}

function approvalControls(call) {
  const reason = el("input", "reason");
  reason.placeholder = "reason (the model reads it)";
  reason.setAttribute("aria-label", `Reason to reject ${call.tool}`);
  const approve = button("approve", "Approve", () => decide(call.call_id, "approve", {}));
  const reject = button("reject", "Reject", () =>
    decide(call.call_id, "reject", { reason: reason.value.trim() || "rejected on the page" }));
  return [reason, approve, reject];
}

function resultControls(call) {
  const text = el("textarea", "result-text");
  text.placeholder = "the call's result (the model reads it)";
  text.setAttribute("aria-label", `Result of ${call.tool}`);
  const ok = button("submit-result", "Submit result", () =>
    decide(call.call_id, "result", { status: "success", result: text.value }));
  const failed = button("submit-error", "Submit as error", () =>
    decide(call.call_id, "result", { status: "error", error: text.value.trim() || "failed, said on the page" }));
  return [text, ok, failed];
}

function answerControls(call) {
  const question = el("p", "question", typeof call.payload === "string" ? call.payload : JSON.stringify(call.payload));
  const text = el("input", "answer-text");
  text.placeholder = "your answer";
  text.setAttribute("aria-label", `Answer to ${call.tool}`);
  const send = button("send-answer", "Answer", () => decide(call.call_id, "answer", { answer: text.value }));
  return [question, text, send];
}

function button(cls, label, onclick) {
  const b = el("button", cls, label);
  b.type = "button";
  b.onclick = onclick;
  return b;
}

async function decide(callId, action, body) {
  const path = `/threads/${encodeURIComponent(view.threadId)}/calls/${encodeURIComponent(callId)}/${action}`;
  await api("POST", path, body).catch(() => null);
  loadWaiting();
}

// -- events -------------------------------------------------------------------

function handle(ev) {
  if (ev.seq <= view.lastSeq) return;  // already shown (a reconnect overlaps)
  view.lastSeq = ev.seq;
  const d = ev.data || {};
  switch (ev.type) {
    case "text_delta": onDelta(d); return;
    case "message_created": onMessage(d); break;
    case "tool_call_started": onToolStarted(d); break;
    case "tool_result": onToolResult(d); break;
    case "tool_invoked": onInvoked(d); break;
    case "tool_invoked_result": onInvokedResult(d); break;
    case "execution_started":
      view.sideSteps = { a: 0, b: 0 };
      $("step-count").textContent = $("side-a-steps").textContent = $("side-b-steps").textContent = "0";
      setRunning(true, "running"); loadThreads(); break;
    case "step_started":
      $("step-count").textContent = d.step;
      view.sideSteps[d.side] += 1;
      $(d.side === "a" ? "side-a-steps" : "side-b-steps").textContent = view.sideSteps[d.side];
      break;
    case "turn_started": $("turn-count").textContent = d.turn; break;
    case "execution_stopped":
      setRunning(false, `stopped: ${d.reason}${d.stopped_by ? " (side " + d.stopped_by + ")" : ""}`);
      refreshUsage(); loadThreads(); break;
    case "execution_failed": setRunning(false, `failed: ${d.error || ""}`); refreshUsage(); loadThreads(); break;
    case "approval_requested": case "result_requested": case "question_asked":
    case "approval_decided": case "result_submitted": case "question_answered": loadWaiting(); break;
  }
  if (!BUILTIN_EVENTS.has(ev.type)) log("custom-events", ev, brief(ev.data));
  log("event-log", ev, ev.type === "message_created" || ev.type === "tool_result" ? brief(d.content) : brief(ev.data));
}

function connect() {
  const id = view.threadId;
  if (!id) return;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/threads/${encodeURIComponent(id)}/events?after=${view.lastSeq}`;
  const ws = token() ? new WebSocket(url, ["bearer", token()]) : new WebSocket(url);
  view.ws = ws;
  $("connection").textContent = "connecting…";
  ws.onopen = () => { view.retry = 0; $("connection").textContent = "live"; };
  ws.onmessage = (msg) => handle(JSON.parse(msg.data));
  ws.onclose = () => {
    if (view.ws !== ws) return;  // replaced by another thread's socket
    $("connection").textContent = "reconnecting…";
    view.retry = Math.min(view.retry + 1, 5);
    setTimeout(() => { if (view.ws === ws) connect(); }, 500 * view.retry);
  };
}

// -- actions ------------------------------------------------------------------

async function openThread(id) {
  const thread = await api("GET", `/threads/${encodeURIComponent(id)}`);
  if (view.ws) { const old = view.ws; view.ws = null; old.close(); }
  Object.assign(view, { threadId: thread.id, agentType: thread.agent_type, lastSeq: 0, streaming: {}, toolCards: {} });
  for (const list of ["messages", "custom-events", "event-log"]) $(list).replaceChildren();
  $("thread-id").value = thread.id;
  $("agent").value = thread.agent;
  $("info-id").textContent = thread.id;
  $("info-agent").textContent = `${thread.agent} (${thread.agent_type})`;
  const agent = (window.agents || []).find((a) => a.name === thread.agent);
  $("side-a-name").textContent = agent ? agent.side_a.prompt : "side a";
  $("side-b-name").textContent = agent && agent.side_b ? agent.side_b.prompt : "person";
  $("composer").hidden = thread.agent_type !== "ai_human";
  setCounters(thread.execution);
  setUsage(thread.usage);
  setRunning(thread.running, thread.status);
  history.replaceState(null, "", `#thread=${thread.id}`);
  for (const b of document.querySelectorAll("#threads .thread")) {
    if (b.dataset.id === thread.id) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current");
  }
  loadTree(thread.id);
  if (thread.forked_from) await showForkedHistory(thread);
  loadWaiting();
  await eventTypesReady;
  connect();
}

// A fork's event log starts at its fork: the history it was given is read as messages.
async function showForkedHistory(thread) {
  const path = `/threads/${encodeURIComponent(thread.id)}/messages?limit=1000`;
  const page = await api("GET", path).catch(() => null);
  if (!page || view.threadId !== thread.id) return;
  for (const m of page.messages) if (m.seq <= thread.forked_at) onMessage(m);
}

// -- your threads: newest first, with agent and status (GET /threads answers only the token's own) --

function threadStatus(t) { return t.running ? "running" : t.status; }

function renderThreads(threads) {
  const list = $("threads");
  list.replaceChildren(...threads.map((t) => {
    const item = el("li");
    const button = el("button", "thread");
    button.type = "button";
    button.dataset.id = t.id;
    if (t.id === view.threadId) button.setAttribute("aria-current", "true");
    button.appendChild(el("span", "agent", t.agent));
    button.appendChild(el("span", `status status-${threadStatus(t)}`, threadStatus(t)));
    button.appendChild(el("time", null, new Date(t.created_at * 1000).toLocaleString()));
    button.appendChild(el("code", "id", t.id));
    button.addEventListener("click", () => openThread(t.id).catch(() => {}));
    item.appendChild(button);
    return item;
  }));
  $("no-threads").hidden = threads.length > 0;
}

let threadsLoading = null;
function loadThreads() {
  // one request at a time; a change said while one is out loads again after it
  if (threadsLoading) { threadsLoading.again = true; return threadsLoading.done; }
  const state = { again: false };
  state.done = api("GET", "/threads?limit=50").then(({ threads }) => renderThreads(threads))
    .catch(() => {}).finally(() => { threadsLoading = null; if (state.again) loadThreads(); });
  threadsLoading = state;
  return state.done;
}

async function loadAgents() {
  const { agents } = await api("GET", "/agents");
  window.agents = agents;
  const selected = $("agent").value;
  $("agent").replaceChildren(...agents.map((a) => {
    const option = el("option", null, `${a.title || a.name} — ${a.type}`);
    option.value = a.name;
    return option;
  }));
  if (selected) $("agent").value = selected;
}

function control(path, body) {
  return () => view.threadId && api("POST", `/threads/${encodeURIComponent(view.threadId)}${path}`, body).catch(() => {});
}

function init() {
  $("token").value = localStorage.getItem("orchestrator.token") || "";
  $("token").addEventListener("change", () => {
    localStorage.setItem("orchestrator.token", token());
    loadAgents().then(loadThreads).catch(() => {});
  });
  $("new-thread").onclick = async () => {
    const thread = await api("POST", "/threads", { agent: $("agent").value }).catch(() => null);
    if (thread) { await openThread(thread.id); loadThreads(); }
  };
  $("refresh-threads").onclick = () => loadThreads();
  $("open-thread").onclick = () => openThread($("thread-id").value.trim()).catch(() => {});
  $("run").onclick = control("/run");
  $("stop").onclick = control("/stop");
  $("force-a").onclick = control("/force-turn", { side: "a" });
  $("force-b").onclick = control("/force-turn", { side: "b" });
  $("composer").onsubmit = async (e) => {
    e.preventDefault();
    const text = $("message-input").value;
    if (!text.trim() || !view.threadId) return;
    const ok = await api("POST", `/threads/${encodeURIComponent(view.threadId)}/messages`, { text }).catch(() => null);
    if (ok) $("message-input").value = "";
  };
  $("message-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  const wanted = new URLSearchParams(location.hash.slice(1)).get("thread");
  loadAgents().then(() => { loadThreads(); return wanted && openThread(wanted); }).catch(() => {});
}

init();
