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
const state = { history: [], controller: null };

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
    this.note(`${data.from} could not answer (${data.reason}); ${data.to ? `trying ${data.to}` : "no model left"}.`);
    if (data.discard_partial) {
      this.text = "";
      this.render();
    }
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

async function send(question) {
  notice("");
  const user = element("section", "turn user", question);
  $("log").append(user);
  const messages = [...state.history, { role: "user", content: question }];
  const body = { messages, stream: true };
  if ($("model").value) body.model = $("model").value;
  state.controller = new AbortController();
  busy(true);
  let turn = null;
  let finished = false;
  try {
    const response = await fetch("chat", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body),
      signal: state.controller.signal,
    });
    if (!response.ok) {
      let detail = "";
      try {
        detail = (await response.json()).error?.message ?? "";
      } catch {
        // a gateway's error page is not JSON
      }
      const known = HTTP_ERRORS[response.status] ?? `The server answered ${response.status}.`;
      notice(detail && !HTTP_ERRORS[response.status] ? `${known} ${detail}` : known);
      user.remove();
      $("question").value = question; // nothing was lost: send it again when ready
      return;
    }
    state.history.push({ role: "user", content: question });
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
      }
      buffer = buffer.slice(cut + 2);
    }
    if (!finished) notice("The connection ended before the answer finished. What arrived is kept; send again to retry.");
  } catch (error) {
    if (error.name === "AbortError") turn?.note("Stopped.");
    else notice("The connection was lost before the answer finished. What arrived is kept; send again to retry.");
  } finally {
    busy(false);
    state.controller = null;
  }
}

function busy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  $("question").disabled = on;
}

// --- wiring -------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  loadSettings();
  loadModels();
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    if (!question || state.controller) return;
    $("question").value = "";
    send(question);
  });
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("ask").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.controller?.abort());
  $("new-chat").addEventListener("click", () => {
    state.controller?.abort();
    state.history = [];
    $("log").replaceChildren();
    notice("");
    $("question").focus();
  });
  $("question").focus();
});
