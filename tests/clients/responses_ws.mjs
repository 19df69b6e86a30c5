// openai-node's Responses WebSocket client, unchanged, against chatloop's WebSocket mode. In openai-node 7.60 it is
// `new ResponsesWS(client)` from "openai/resources/responses/ws" (resources/responses/ws.mjs over ws-base.mjs: it
// connects to the client's base URL + /responses as ws(s)://, sends `Authorization: Bearer` and the client's default
// headers, emits each server event as 'event' and as its type, and an `error` event as 'error'). Run by
// tests/clients/test_websocket_mode.py:
//   node responses_ws.mjs
// with CHATLOOP_BASE_URL (the app's /v1). Prints one JSON line: what each step saw.
import OpenAI from "openai";
import { ResponsesWS } from "openai/resources/responses/ws";

const client = new OpenAI({
  baseURL: process.env.CHATLOOP_BASE_URL,
  apiKey: "unused",
  defaultHeaders: { "x-api-key": "node-key" },
});
const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

// The events of one response: up to its terminal event, or the error event that answers it instead.
function respond(socket, body) {
  return new Promise((resolve) => {
    const events = [];
    const onEvent = (event) => {
      events.push(event);
      if (TERMINAL.has(event.type) || event.type === "error") {
        socket.off("event", onEvent);
        resolve(events);
      }
    };
    socket.on("event", onEvent);
    socket.send({ type: "response.create", model: "chatloop", ...body });
  });
}

const last = (events) => events[events.length - 1];
const errors = [];
const open = () => {
  const socket = new ResponsesWS(client);
  socket.on("error", (error) => errors.push(error.error?.error?.code ?? String(error.message)));
  return socket;
};

const socket = open();
const tool = await respond(socket, { input: "compute six times seven", store: false });
const first = await respond(socket, { input: "my name is Ada", store: false });
const continued = await respond(socket, {
  input: "what is my name?",
  store: false,
  previous_response_id: last(first).response.id,
});
const kept = await respond(socket, { input: "remember the lighthouse" });
const unknown = await respond(socket, { input: "hi", previous_response_id: "resp_nothing" });
socket.close();

const again = open(); // a reconnect: a stored response goes on, this socket's memory starts empty
const recovered = await respond(again, { input: "what did I ask?", previous_response_id: last(kept).response.id });
again.close();

const text = (events) => last(events).response?.output_text ?? last(events).response?.output?.at(-1)?.content?.[0]?.text;
console.log(
  JSON.stringify({
    ok: true,
    tool: { types: tool.map((e) => e.type), text: text(tool) },
    continued: text(continued),
    second: last(first).response.id !== last(continued).response.id,
    unknown: { type: last(unknown).type, code: last(unknown).error?.code, param: last(unknown).error?.param },
    recovered: text(recovered),
    errors,
  }),
);
process.exit(0);
