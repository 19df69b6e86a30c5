// chatloop's chat page: streams /chat (SSE over fetch, since EventSource cannot POST) and renders each event as it
// arrives. Model text is untrusted: it is rendered with marked, then sanitised with DOMPurify, both vendored.
"use strict";

const STOP_REASONS = {
  stop: "The model answered.",
  length: "The answer reached its token limit and was cut.",
  tool_calls: "The model called a tool this page does not run.",
  iteration_cap: "The loop reached its limit of model calls, so the model answered without tools.",
  deadline: "Time ran short, so the model answered with what it had.",
  loop_detected: "The model repeated itself, so tool use was stopped and it answered.",
  tool_budget: "The tool's budget for this question was used up, so the model answered.",
  approval_required: "A tool waits for your approval before it runs.",
  all_models_failed: "No model could answer: every model in the chain failed.",
  error: "Something went wrong on the server.",
};
const HTTP_ERRORS = {
  401: "The API did not accept these credentials: check the key under “API key”.",
  403: "The API key is missing or wrong: enter it under “API key”.",
  413: "This conversation is too long for the server. Start a new chat, or shorten the question.",
  429: "Too many requests: the API's usage limit was reached. Wait a moment, then send again.",
  503: "No model is available right now. Try again in a moment.",
};

const $ = (id) => document.getElementById(id);
const state = { history: [], controller: null, conversation: null, lastItem: null, opening: null, waiting: null };

function apiKey() {
  return $("api-key").value.trim();
}

function headers() {
  const h = { "content-type": "application/json" };
  if (apiKey()) h["x-api-key"] = apiKey();
  return h;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function markdown(text) {
  return DOMPurify.sanitize(marked.parse(text, { async: false }), { USE_PROFILES: { html: true } });
}

// --- settings -----------------------------------------------------------------------------------
function loadSettings() {
  const saved = localStorage.getItem("chatloop.apiKey");
  if (saved) {
    $("api-key").value = saved;
    $("remember").checked = true;
  }
  const keep = () => {
    if ($("remember").checked && apiKey()) localStorage.setItem("chatloop.apiKey", apiKey());
    else localStorage.removeItem("chatloop.apiKey");
  };
  $("remember").addEventListener("change", keep);
  $("api-key").addEventListener("change", () => {
    keep();
    loadModels();
  });
}

async function loadModels() {
  const picker = $("model");
  let ids = [];
  try {
    const response = await fetch("v1/models", { headers: headers() });
    if (response.ok) ids = (await response.json()).data.map((m) => m.id).filter((id) => id !== "chatloop");
    else if (response.status === 404) ids = (await (await fetch("health", { headers: headers() })).json()).model_chain;
  } catch {
    return; // offline or refused: the configured chain still answers
  }
  const chosen = picker.value;
  picker.replaceChildren(new Option("the configured chain", ""), ...ids.map((id) => new Option(id, id)));
  picker.value = ids.includes(chosen) ? chosen : "";
}

// --- one turn -----------------------------------------------------------------------------------
class Turn {
  constructor() {
    this.box = element("section", "turn assistant");
    this.answer = element("div", "answer");
    this.tools = new Map();
    this.text = "";
    this.pending = false;
    this.box.append(this.answer);
    $("log").append(this.box);
  }

  render() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.answer.innerHTML = markdown(this.text);
    });
  }

  note(text) {
    this.box.insertBefore(element("p", "note", text), this.answer);
  }

  on(name, data) {
    const handler = this[`on_${name}`];
    if (handler) handler.call(this, data);
  }

  on_status(data) {
    if (data.status === "context_trim") this.note(`Older messages were trimmed to fit ${data.model}'s context window.`);
    if (data.status === "tools_unavailable") {
      for (const [source, reason] of Object.entries(data.sources)) this.note(`${source}'s tools are unavailable: ${reason}`);
    }
  }

  on_delta(data) {
    this.text += data.content;
    this.render();
  }

  on_model_fallback(data) {
    // Text already shown stays (it is part of the answer the server records); the next model's text continues it.
    const cut = data.partial_kept ? " The text above was cut off; the next model continues it." : "";
    this.note(`${data.from} could not answer (${data.reason}); ${data.to ? `trying ${data.to}` : "no model left"}.${cut}`);
  }

  on_tool_call_start(data) {
    const block = element("details", "tool");
    const summary = element("summary");
    const status = element("span", "status", "running…");
    summary.append(element("strong", "", data.name), " ");
    // A tool that runs on an MCP server names its server, as the decision log line does.
    if (data.server) summary.append(element("span", "server", `on ${data.server}`), " ");
    summary.append(status);
    let code = data.arguments;
    try {
      const args = JSON.parse(data.arguments);
      code = data.server ? JSON.stringify(args, null, 2) : (args.code ?? data.arguments);
    } catch {
      // arguments that are not JSON are shown as they are
    }
    block.append(summary, element("pre", "code", code));
    this.tools.set(data.id, { block, status });
    this.box.insertBefore(block, this.answer);
  }

  on_approval_request(data, answered = false) {
    // A call the operator wants a person to approve (APPROVAL_REQUIRED_TOOLS): nothing ran. The answer goes to the
    // server as the next turn of this conversation, which runs the call (or tells the model it was denied).
    const block = element("div", "approval");
    block.append(element("p", "", `${data.name}${data.server ? ` on ${data.server}` : ""} waits for your approval:`));
    let shown = data.arguments;
    try {
      const args = JSON.parse(data.arguments);
      shown = data.server ? JSON.stringify(args, null, 2) : (args.code ?? data.arguments);
    } catch {
      // arguments that are not JSON are shown as they are
    }
    block.append(element("pre", "code", shown));
    const approve = element("button", "approve", "Approve");
    const deny = element("button", "deny", "Deny");
    const answer = (yes) => {
      approve.disabled = deny.disabled = true;
      send(`${yes ? "Approved" : "Denied"}: ${data.name}`, [{ approval_request_id: data.id, approve: yes }]);
    };
    approve.addEventListener("click", () => answer(true));
    deny.addEventListener("click", () => answer(false));
    approve.disabled = deny.disabled = answered; // a reopened conversation's request that was answered already
    block.append(approve, " ", deny);
    this.box.insertBefore(block, this.answer);
  }

  on_tool_call_result(data) {
    const tool = this.tools.get(data.id);
    if (!tool) return;
    let body = data.content;
    try {
      const parsed = JSON.parse(data.content);
      const result = typeof parsed.result === "string" ? parsed.result : JSON.stringify(parsed.result, null, 2);
      body = "error" in parsed ? `Error: ${parsed.error}` : result;
      if (parsed.output) body += `\n\nconsole output:\n${parsed.output}`;
    } catch {
      // a result that is not JSON is shown as it is
    }
    const took = data.duration_ms !== undefined ? ` in ${Math.round(data.duration_ms)} ms` : "";
    tool.status.textContent = `${data.status}${data.reason ? ` (${data.reason})` : ""}${took}`;
    tool.status.className = `status status-${data.status}`;
    tool.block.append(element("pre", "result", body));
  }

  on_error(data) {
    this.note(`Error: ${data.message}`);
  }

  on_done(data) {
    if (!this.text && data.message.content) {
      this.text = data.message.content;
      this.render();
    }
    const explained = STOP_REASONS[data.stop_reason] ?? data.stop_reason;
    const meta = element("p", "meta");
    meta.append(
      element("span", "model", `${data.model ?? "no model"} · `),
      element("span", "iterations", `${data.iterations} model call${data.iterations === 1 ? "" : "s"} · `),
      element("span", "stop-reason", `${data.stop_reason}: ${explained}`),
    );
    this.box.append(meta);
    state.history.push({ role: "assistant", content: data.message.content || "" });
  }
}

function* events(buffer) {
  // SSE frames end with a blank line; comment lines (": ping", the heartbeat) carry nothing.
  for (const frame of buffer.split("\n\n")) {
    let name = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
    }
    if (data.length) yield [name, JSON.parse(data.join("\n"))];
  }
}

async function send(question, approvals = null, images = []) {
  // ``approvals``: answers to the conversation's approval requests, sent instead of a new message; ``images``: the
  // composer's images ({url, alt}), sent with the question.
  notice("");
  const user = Images.turn(question, images);
  $("log").append(user);
  state.controller = new AbortController();
  busy(true);
  let turn = null;
  let finished = false;
  let thread = null;
  try {
    try {
      thread = await conversationFor(question || "Image", state.controller.signal);
    } catch (error) {
      if (error.name === "AbortError") throw error;
      notice(error.message);
      user.remove();
      if (!approvals) keep(question, images); // nothing was lost: send it again when ready
      return;
    }
    // The server has the conversation: only the new message goes, and the turn is stored with it.
    const body = approvals
      ? { conversation: thread.id, messages: [], approvals, stream: true }
      : { conversation: thread.id, messages: [{ role: "user", content: Images.content(question, images) }], stream: true };
    if ($("model").value) body.model = $("model").value;
    markPending(thread.id, question, state.lastItem);
    const response = await fetch("chat", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body),
      signal: state.controller.signal,
    });
    if (!response.ok) {
      let detail = "";
      let code = "";
      try {
        ({ message: detail = "", code = "" } = (await response.json()).error ?? {});
      } catch {
        // a gateway's error page is not JSON
      }
      const known = HTTP_ERRORS[response.status] ?? `The server answered ${response.status}.`;
      notice(detail && !HTTP_ERRORS[response.status] ? `${known} ${detail}` : known);
      refused(thread, response.status, code);
      user.remove();
      if (!approvals) keep(question, images); // nothing was lost: send it again when ready
      return;
    }
    state.history.push({ role: "user", content: Images.content(question, images) });
    turn = new Turn();
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const cut = buffer.lastIndexOf("\n\n");
      if (cut < 0) continue;
      for (const [name, data] of events(buffer.slice(0, cut))) {
        turn.on(name, data);
        finished = finished || name === "done";
        if (name === "done") thread.stopReason = data.stop_reason;
      }
      buffer = buffer.slice(cut + 2);
    }
    if (finished) answered(thread);
    else lost(thread, "The connection ended before the answer finished.", user, turn);
  } catch (error) {
    if (error.name === "AbortError") {
      turn?.note(thread ? STOPPED_IN_CONVERSATION : "Stopped.");
      if (thread) clearPending(thread.id); // a stopped turn is not stored: nothing to wait for after a reload
    }
    else lost(thread, "The connection was lost before the answer finished.", user, turn);
  } finally {
    busy(false);
    state.controller = null;
  }
}

async function stopTurn() {
  // A stored conversation's turn outlives its page (a reload must find the answer), so Stop asks the server to end
  // it as well as stopping the reading; a stopped turn is not stored.
  const id = conversationInHash();
  state.controller?.abort();
  if (!id) return;
  try {
    await fetch("chat/stop", { method: "POST", headers: headers(), body: JSON.stringify({ conversation: id }) });
  } catch {
    // the server is out of reach: the turn ends there at its deadline
  }
}

function busy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  $("question").disabled = $("attach-button").disabled = on;
}

function keep(question, images) {
  $("question").value = question;
  Images.restore(images);
}

// --- conversations kept on the server (issue 26) -----------------------------------------------------
// Each chat is a conversation in the server's store (/v1/conversations), owned by the API key: /chat gets its id
// and only the new message. The current one is the URL's hash, so a reload (or a bookmark) reopens it. A question
// still being answered is remembered in sessionStorage until its answer is stored, so a page reloaded mid-answer
// follows it: the server runs a conversation's turn to its end and stores it even when the page went away.
const TITLE_LENGTH = 60;
const POLL_MS = 1000;
const PENDING_WAIT_MS = 6 * 60 * 1000; // longer than any turn may run: after it, the turn failed and was not stored
const UNANSWERED_WAIT_MS = 2 * 60 * 1000; // a stored question with no answer and no turn of ours running
const STORE_ERRORS = {
  ...HTTP_ERRORS,
  404: "This conversation is no longer kept (it was deleted, or it expired). Start a new chat.",
  503: "The conversation store is not answering right now. Try again in a moment.",
};
const CONVERSATION_ID = /^conv_[A-Za-z0-9]{1,128}$/;
const NOT_STORED = new Set(["all_models_failed", "error"]);

class StoreError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

async function store(path, options = {}) {
  let response;
  try {
    response = await fetch(path, { ...options, headers: headers() });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new StoreError("The server could not be reached. Check the connection, then try again.", 0);
  }
  if (response.ok) return response.json();
  let detail = "";
  try {
    detail = (await response.json()).error?.message ?? "";
  } catch {
    // a gateway's error page is not JSON
  }
  const known = STORE_ERRORS[response.status];
  throw new StoreError(known ?? `The server answered ${response.status}. ${detail}`.trim(), response.status);
}

function titleOf(text) {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > TITLE_LENGTH ? `${line.slice(0, TITLE_LENGTH - 1).trimEnd()}…` : line;
}

function conversationInHash() {
  const id = decodeURIComponent(location.hash.slice(1));
  return CONVERSATION_ID.test(id) ? id : null;
}

function setCurrent(id) {
  state.conversation = id;
  if (id && conversationInHash() !== id) location.hash = id;
  if (!id && location.hash) history.replaceState(null, "", location.pathname + location.search);
  for (const row of $("conversation-list").children) row.setAttribute("aria-current", String(row.dataset.id === id));
}

// A question sent and not yet answered, by conversation: {question, after (the last item before it), at}.
const pendingKey = (id) => `chatloop.pending.${id}`;
function markPending(id, question, after) {
  sessionStorage.setItem(pendingKey(id), JSON.stringify({ question, after, at: Date.now() }));
}
function pendingOf(id) {
  try {
    return JSON.parse(sessionStorage.getItem(pendingKey(id)) ?? "null");
  } catch {
    return null;
  }
}
const clearPending = (id) => sessionStorage.removeItem(pendingKey(id));

async function conversationFor(question, signal) {
  // The current conversation's id, or a new one named by the question (its first message).
  if (state.conversation) return { id: state.conversation, created: false };
  const made = await store("v1/conversations", {
    method: "POST",
    body: JSON.stringify({ metadata: { title: titleOf(question) } }),
    signal,
  });
  state.lastItem = null;
  setCurrent(made.id);
  loadConversations();
  return { id: made.id, created: true };
}

const STOPPED_IN_CONVERSATION =
  "Stopped. The model was stopped too; this question and its partial answer are not kept in the conversation.";

function refused(thread, status, code) {
  // /chat refused the question: it is not in the conversation. A conversation made for it alone is not kept.
  clearPending(thread.id);
  if (code === "store_unavailable") notice(STORE_ERRORS[503]);
  if (thread.created) forget(thread.id);
  else if (status === 404) {
    notice(STORE_ERRORS[404]);
    setCurrent(null);
    loadConversations();
  }
}

function lost(thread, what, user, turn) {
  // The stream broke, not the turn: the server finishes it and stores it, so the page waits for it there.
  const mark = thread && pendingOf(thread.id);
  if (mark && !turn) clearPending(thread.id); // no answer began: the question may never have reached the server
  if (!mark || !turn) {
    notice(`${what} What arrived is kept; send again to retry.`);
    return;
  }
  notice(`${what} What arrived is kept; the whole answer appears here when the server has stored it.`);
  awaitAnswer(thread.id, mark.after, [user, turn?.box].filter(Boolean), mark.at + PENDING_WAIT_MS, state.opening);
}

function answered(thread) {
  // A turn every model failed is not stored (a retry sends the question again): a conversation made for it is not kept.
  clearPending(thread.id);
  if (NOT_STORED.has(thread.stopReason) && thread.created) forget(thread.id);
  else noteLastItem(thread.id);
}

async function forget(id) {
  // A conversation made for a first question the server refused: nothing is in it, so it is not kept.
  try {
    await store(`v1/conversations/${id}`, { method: "DELETE" });
  } catch {
    // it expires by itself
  }
  if (state.conversation === id) setCurrent(null);
  loadConversations();
}

async function allItems(id, after = null) {
  const items = [];
  for (let page = 0; page < 50; page++) {
    const query = new URLSearchParams({ order: "asc", limit: "100" });
    if (after) query.set("after", after);
    const listed = await store(`v1/conversations/${id}/items?${query}`);
    items.push(...listed.data);
    if (!listed.has_more || !listed.data.length) break;
    after = listed.data.at(-1).id;
  }
  return items;
}

async function noteLastItem(id) {
  // After a turn: the id of the conversation's last item, where a later question's answer will follow.
  try {
    const listed = await store(`v1/conversations/${id}/items?order=desc&limit=1`);
    if (state.conversation === id) state.lastItem = listed.data[0]?.id ?? state.lastItem;
  } catch {
    // the next reopen reads it
  }
}

const textOf = (item) => (item.content ?? []).map((part) => part.text ?? part.refusal ?? "").join("");
const isAnswer = (item) => item.type === "message" && item.role === "assistant";

function renderItems(items) {
  // Stored items as the live page shows them: a user message, then one assistant block with its tool runs and text.
  let turn = null;
  const answered = new Set(items.filter((i) => i.type === "mcp_approval_response").map((i) => i.approval_request_id));
  for (const item of items) {
    if (item.type === "message" && item.role === "user") {
      $("log").append(Images.stored(item.content));
      turn = null;
    } else if (isAnswer(item)) {
      turn ??= new Turn();
      turn.text += (turn.text ? "\n\n" : "") + textOf(item);
      turn.render();
    } else if (item.type === "code_interpreter_call") {
      turn ??= new Turn();
      turn.on_tool_call_start({ id: item.id, name: "execute_javascript", arguments: JSON.stringify({ code: item.code ?? "" }) });
      if (item.outputs) {
        const content = item.outputs.map((output) => output.logs ?? "").join("\n");
        turn.on_tool_call_result({ id: item.id, status: item.status === "completed" ? "ok" : "error", content });
      }
    } else if (item.type === "function_call") {
      turn ??= new Turn();
      turn.on_tool_call_start({ id: item.call_id, name: item.name, arguments: item.arguments ?? "" });
    } else if (item.type === "mcp_approval_request") {
      turn ??= new Turn();
      const builtin = item.server_label === "chatloop_builtin"; // the server's own tools (api/items/approvals.py)
      const call = { id: item.id, arguments: item.arguments ?? "" };
      call.name = builtin ? item.name : `${item.server_label}__${item.name}`;
      if (!builtin) call.server = item.server_label;
      turn.on_approval_request(call, answered.has(item.id));
    } else if (item.type === "function_call_output") {
      turn?.on_tool_call_result({ id: item.call_id, status: "ok", content: String(item.output ?? "") });
    }
  }
}

async function openConversation(id) {
  state.controller?.abort(); // a live turn of another conversation goes on on the server, and is kept there
  const opening = (state.opening = Symbol(id));
  waitFor(null);
  setCurrent(id);
  state.history = [];
  state.lastItem = null;
  $("log").replaceChildren();
  notice("");
  document.body.classList.remove("show-conversations");
  let items;
  try {
    items = await allItems(id);
  } catch (error) {
    if (state.opening !== opening) return;
    notice(error.message);
    if (error.status === 404) {
      clearPending(id);
      setCurrent(null);
      loadConversations();
    }
    return;
  }
  if (state.opening !== opening) return; // another conversation was opened meanwhile
  renderItems(items);
  state.lastItem = items.at(-1)?.id ?? null;
  await followPending(id, items, opening);
}

async function followPending(id, items, opening) {
  // A question of ours still being answered (or a stored question without an answer yet): say so, and poll the
  // conversation until the answer is stored, then show it.
  const mark = pendingOf(id);
  const last = items.at(-1);
  if (mark) {
    const start = mark.after ? items.findIndex((item) => item.id === mark.after) + 1 : 0;
    if (items.slice(start).some(isAnswer)) {
      clearPending(id); // answered while the page was away: it is shown already
      return;
    }
    if (Date.now() - mark.at > PENDING_WAIT_MS) {
      clearPending(id);
      notice("The last question was not answered (the turn failed, so it was not kept). It is below: send it again.");
      $("question").value ||= mark.question;
      return;
    }
    const user = element("section", "turn user", mark.question);
    $("log").append(user);
    if (await followLive(id, opening)) return;
    await awaitAnswer(id, last?.id ?? null, [user], mark.at + PENDING_WAIT_MS, opening);
  } else if (last && last.type === "message" && last.role === "user") {
    await awaitAnswer(id, last.id, [], Date.now() + UNANSWERED_WAIT_MS, opening);
  }
}

async function followLive(id, opening) {
  // The turn still running, on whichever copy of the server runs it: its events from the server's journal, shown as
  // they are written; Stop ends it there. False when none runs (or the stream broke): the stored answer is awaited.
  const waiting = element("section", "turn assistant pending");
  waiting.append(element("p", "note", "This question is being answered"));
  $("log").append(waiting);
  waitFor(opening); // no new question in this conversation before its answer is in
  const controller = (state.controller = new AbortController());
  busy(true);
  let turn = null;
  let stopReason = null;
  let stopped = false;
  try {
    const query = new URLSearchParams({ conversation: id, starting_after: "-1" });
    const response = await fetch(`chat/follow?${query}`, { headers: headers(), signal: controller.signal });
    if (response.ok && state.opening === opening) {
      turn = new Turn();
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done || state.opening !== opening) break;
        buffer += decoder.decode(value, { stream: true });
        const cut = buffer.lastIndexOf("\n\n");
        if (cut < 0) continue;
        for (const [name, data] of events(buffer.slice(0, cut))) {
          turn.on(name, data);
          if (name === "done") stopReason = data.stop_reason;
        }
        buffer = buffer.slice(cut + 2);
      }
    }
  } catch (error) {
    stopped = error.name === "AbortError" && state.opening === opening; // Stop (the server was asked too)
  } finally {
    if (state.controller === controller) state.controller = null;
    busy(false);
    if (state.waiting === opening) waitFor(null);
    waiting.remove();
  }
  if (state.opening !== opening) return true;
  if (stopped) {
    (turn ?? new Turn()).note(STOPPED_IN_CONVERSATION);
    clearPending(id);
    return true;
  }
  if (stopReason === null) {
    turn?.box.remove();
    return false;
  }
  clearPending(id);
  if (!NOT_STORED.has(stopReason)) noteLastItem(id);
  return true;
}

async function awaitAnswer(id, after, replaced, until, opening) {
  const waiting = element("section", "turn assistant pending");
  waiting.append(element("p", "note", "This question is being answered"));
  $("log").append(waiting);
  waitFor(opening); // no new question in this conversation before the answer is in it
  try {
    await pollAnswer(id, after, replaced, until, opening, waiting);
  } finally {
    if (state.waiting === opening) waitFor(null);
  }
}

function waitFor(opening) {
  state.waiting = opening;
  $("send").disabled = opening !== null;
}

async function pollAnswer(id, after, replaced, until, opening, waiting) {
  while (Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    if (state.opening !== opening) return;
    let items;
    try {
      items = await allItems(id, after);
    } catch (error) {
      if (state.opening !== opening) return;
      if (error.status === 404) {
        waiting.remove();
        notice(error.message);
        clearPending(id);
        return;
      }
      continue; // a store that did not answer this time may the next
    }
    if (state.opening !== opening) return;
    if (items.some(isAnswer)) {
      for (const node of [...replaced, waiting]) node.remove();
      renderItems(items);
      state.lastItem = items.at(-1).id;
      clearPending(id);
      notice("");
      return;
    }
  }
  waiting.replaceChildren(element("p", "note", "No answer arrived. Send the question again to retry."));
  clearPending(id);
}

function startNewChat() {
  state.controller?.abort();
  state.opening = Symbol("new");
  waitFor(null);
  state.history = [];
  state.lastItem = null;
  setCurrent(null);
  $("log").replaceChildren();
  notice("");
  document.body.classList.remove("show-conversations");
  $("question").focus();
}

async function loadConversations(more = false) {
  const list = $("conversation-list");
  const note = $("conversations-note");
  const query = new URLSearchParams({ limit: "50" });
  if (more && list.lastElementChild) query.set("after", list.lastElementChild.dataset.id);
  let listed;
  try {
    listed = await store(`v1/conversations?${query}`);
  } catch (error) {
    note.textContent = error.message;
    note.hidden = false;
    return;
  }
  const rows = listed.data.filter((c) => CONVERSATION_ID.test(c.id)).map(conversationRow); // ids go into paths
  if (more) list.append(...rows);
  else list.replaceChildren(...rows);
  note.textContent = list.children.length ? "" : "No conversations yet: the first question starts one.";
  note.hidden = !note.textContent;
  $("more-conversations").hidden = !listed.has_more;
}

function conversationRow(conversation) {
  const title = conversation.metadata?.title || `Untitled, ${new Date(conversation.created_at * 1000).toLocaleString()}`;
  const row = element("li");
  row.dataset.id = conversation.id;
  row.setAttribute("aria-current", String(conversation.id === state.conversation));
  const open = element("button", "open", title);
  open.type = "button";
  open.title = title;
  open.addEventListener("click", () => openConversation(conversation.id));
  const remove = element("button", "delete", "×");
  remove.type = "button";
  remove.setAttribute("aria-label", `Delete “${title}”`);
  remove.addEventListener("click", () => confirmDelete(row, conversation.id, [open, remove]));
  row.append(open, remove);
  return row;
}

function confirmDelete(row, id, buttons) {
  // Asked in the list itself, not with a browser dialog: "Delete" removes it from the server for good.
  const ask = element("span", "confirm", "Delete this conversation? ");
  const yes = element("button", "yes", "Delete");
  const no = element("button", "no", "Keep");
  yes.type = no.type = "button";
  ask.append(yes, no);
  row.replaceChildren(ask);
  no.addEventListener("click", () => row.replaceChildren(...buttons));
  yes.addEventListener("click", async () => {
    try {
      await store(`v1/conversations/${id}`, { method: "DELETE" });
    } catch (error) {
      if (error.status !== 404) {
        notice(error.message);
        row.replaceChildren(...buttons);
        return;
      }
    }
    clearPending(id);
    if (state.conversation === id) startNewChat();
    loadConversations();
  });
  yes.focus();
}

function initConversations() {
  state.opening = Symbol("page");
  $("show-conversations").addEventListener("click", () => {
    const shown = document.body.classList.toggle("show-conversations");
    $("show-conversations").setAttribute("aria-expanded", String(shown));
  });
  $("more-conversations").addEventListener("click", () => loadConversations(true));
  window.addEventListener("hashchange", () => {
    const id = conversationInHash();
    if (id && id !== state.conversation) openConversation(id);
    else if (!id && state.conversation) startNewChat();
  });
  $("api-key").addEventListener("change", () => {
    loadConversations();
    if (state.conversation && !state.controller) openConversation(state.conversation);
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") loadConversations(); // made or deleted in another window meanwhile
  });
  loadConversations();
  const id = conversationInHash();
  if (id) openConversation(id);
}

// --- wiring -------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  loadSettings();
  loadModels();
  Images.setup(notice);
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    if ((!question && !Images.count()) || !Images.ready() || state.controller || state.waiting) return;
    $("question").value = "";
    send(question, null, Images.take());
  });
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("ask").requestSubmit();
    }
  });
  $("stop").addEventListener("click", stopTurn);
  $("new-chat").addEventListener("click", startNewChat);
  initConversations();
  $("question").focus();
});
