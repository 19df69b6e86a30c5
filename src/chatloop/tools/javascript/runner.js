// The sandbox runner: one long-lived Deno process with no permissions at all, a fresh Worker for every snippet.
//
// Two realms. The user's code runs in a Worker (its own V8 isolate and globals, `Deno` deleted, so no host path,
// pid, environment or stdout). This main thread never runs user code: it holds the per-run token, receives the
// worker's message as a structured clone (plain data in this realm), checks and caps it, and writes the result
// frame with its own untouched JSON and TextEncoder. Nothing the user's code can reach takes part in the frame.
// Each run's worker is terminated once its result is written, before the next run's worker is created: no two
// runs' realms ever exist at once, and nothing of one run's realm reaches the next (a process per run cost ~40 ms
// of CPU; a worker, ~8 ms). A run that does not answer (a runaway, a memory bomb) has the whole process killed by
// the parent at its deadline, and a new one started.
//
// Protocol (stdin/stdout): the runner writes "R\n" whenever a worker is ready for code; for each run, the parent
// writes one line "<random token> <code length in bytes>\n" and the code (UTF-8); the runner writes exactly one
// line "<token><json>\n", then "R\n" once the next run's worker is ready. It exits when stdin closes.
//
// Result JSON: {"result": <json-safe value>, "output": "<console text>"} or {"error": "<Type>: <message>",
// "output": "..."}. JSON-safe mapping of values (also in docs/tools.md):
//   undefined -> null (inside objects: key omitted), NaN / Infinity / -Infinity -> "NaN" / "Infinity" /
//   "-Infinity", BigInt -> decimal string, Map -> object of String(key) -> value, Set -> array,
//   Date -> ISO string, typed arrays -> arrays, Error -> "Type: message", function -> "[Function: name]",
//   symbol -> "Symbol(desc)", circular reference -> "[Circular]".

const MAX_RESULT_JSON = 16 * 1024; // characters of the result as JSON; longer is cut and says so
const MAX_OUTPUT = 16 * 1024; // characters of console output kept
const MAX_ERROR = 2 * 1024; // characters of an error message kept

const stringify = JSON.stringify;
const parse = JSON.parse;
const exit = Deno.exit;
const stdinReadable = Deno.stdin.readable;
const stdout = Deno.stdout;
const writeSync = stdout.writeSync.bind(stdout);
const encoder = new TextEncoder();

function writeAll(bytes) {
  let offset = 0;
  while (offset < bytes.length) offset += writeSync(bytes.subarray(offset));
}

// --- the worker: everything below runs in the user's realm ------------------------------------------------
function userRealm(codeBuffer) {
  const post = self.postMessage.bind(self);
  const decoder = new TextDecoder();
  const inspect = Deno.inspect;
  const stringify = JSON.stringify;
  const AsyncFunction = (async () => {}).constructor;
  const isArray = Array.isArray;
  const objectKeys = Object.keys;
  const MAX_CONSOLE = 64 * 1024;
  const MAX_DEPTH = 32;

  // No host details (Deno.execPath, cwd, ppid, env, stdout...), nothing that persists, no threads, and nothing
  // that is the process's rather than this realm's (a BroadcastChannel or a blob: URL would outlive this worker).
  for (const name of ["Deno", "localStorage", "sessionStorage", "caches", "Worker", "SharedWorker", "BroadcastChannel"]) {
    try {
      delete globalThis[name];
    } catch (_) { /* non-configurable: ignore */ }
  }
  for (const name of ["createObjectURL", "revokeObjectURL"]) {
    try {
      delete URL[name];
    } catch (_) { /* ignore */ }
  }

  let output = "";
  let outputTruncated = false;
  function formatArg(value) {
    if (typeof value === "string") return value;
    try {
      return inspect(value, { colors: false, depth: 4, compact: true });
    } catch (_) {
      return String(value);
    }
  }
  function log(...args) {
    if (outputTruncated) return;
    const line = args.map(formatArg).join(" ") + "\n";
    if (output.length + line.length > MAX_CONSOLE) {
      output += line.slice(0, MAX_CONSOLE - output.length);
      outputTruncated = true;
      return;
    }
    output += line;
  }
  for (const level of ["log", "info", "warn", "error", "debug", "trace"]) {
    globalThis.console[level] = log;
  }

  function jsonSafe(value, seen = new Set(), depth = 0) {
    switch (typeof value) {
      case "undefined":
        return null;
      case "number":
        if (Number.isNaN(value)) return "NaN";
        if (value === Infinity) return "Infinity";
        if (value === -Infinity) return "-Infinity";
        return value;
      case "bigint":
        return value.toString();
      case "string":
      case "boolean":
        return value;
      case "symbol":
        return value.toString();
      case "function":
        return `[Function: ${value.name || "anonymous"}]`;
    }
    if (value === null) return null;
    if (seen.has(value)) return "[Circular]";
    if (depth > MAX_DEPTH) return "[Too deep]";
    seen.add(value);
    try {
      if (value instanceof Date) return isNaN(value) ? "Invalid Date" : value.toISOString();
      if (value instanceof Error) return `${value.name}: ${value.message}`;
      if (value instanceof Map) {
        const out = {};
        for (const [k, v] of value) out[typeof k === "string" ? k : String(jsonSafe(k, seen, depth + 1))] = jsonSafe(v, seen, depth + 1);
        return out;
      }
      if (value instanceof Set) return [...value].map((v) => jsonSafe(v, seen, depth + 1));
      if (ArrayBuffer.isView(value)) return Array.from(value, (v) => jsonSafe(v, seen, depth + 1));
      if (isArray(value)) return value.map((v) => jsonSafe(v, seen, depth + 1));
      if (value instanceof RegExp) return value.toString();
      const out = {};
      for (const key of objectKeys(value)) {
        const v = value[key];
        if (v === undefined) continue;
        out[key] = jsonSafe(v, seen, depth + 1);
      }
      return out;
    } finally {
      seen.delete(value);
    }
  }

  function describeError(err) {
    if (err instanceof Error) return `${err.name}: ${err.message}`;
    try {
      return `Uncaught: ${formatArg(err)}`;
    } catch (_) {
      return "Uncaught: (unprintable value)";
    }
  }

  // `code` as an async body that returns its last statement when that statement is an expression: lets
  // `const x = await f(); x + 1` report x + 1. The last statement starts after the last newline, `;` or `}` that
  // leaves something that parses; a few cut points are tried from the end, then the code as written.
  const STATEMENT = /^(return|const|let|var|if|for|while|do|switch|try|function|class|throw|import|export)\b|^[}{]/;
  function compileAsync(code) {
    const trimmed = code.replace(/[\s;]+$/, "");
    let end = trimmed.length;
    for (let tries = 0; tries < 16; tries++) {
      const cut = Math.max(trimmed.lastIndexOf("\n", end - 1), trimmed.lastIndexOf(";", end - 1), trimmed.lastIndexOf("}", end - 1));
      const last = trimmed.slice(cut + 1).trim();
      if (last && !STATEMENT.test(last)) {
        try {
          return new AsyncFunction(`${trimmed.slice(0, cut + 1)}\nreturn (${last});`);
        } catch (_) { /* not an expression from this cut: try an earlier one */ }
      }
      if (cut < 0) break;
      end = cut;
    }
    return new AsyncFunction(code);
  }

  async function evaluate(code) {
    try {
      // Indirect eval: a script whose completion value is the last expression (`const x = 5; x * 2` -> 10).
      return await (0, eval)(code);
    } catch (err) {
      // Top-level `await` / `return` are not allowed in a script, and a SyntaxError means nothing ran: run it as
      // an async body. The message need not name them: in a script `(await x).y` reads `await` as a name.
      if (!(err instanceof SyntaxError) || !/\b(await|return)\b/.test(code)) throw err;
      let body;
      try {
        body = compileAsync(code);
      } catch (_) {
        throw err; // not valid as an async body either: report the script's own error
      }
      return await body();
    }
  }

  async function run(code) {
    let message;
    try {
      const value = await evaluate(code);
      message = { json: stringify(jsonSafe(value)) ?? "null", output, output_truncated: outputTruncated };
    } catch (err) {
      message = { error: describeError(err), output, output_truncated: outputTruncated };
    }
    post(message);
  }

  // The code arrives in shared memory: this thread blocks in Atomics.wait and the main thread's notify wakes it at
  // once (an event-loop message took ~2.5 ms between two idle threads). Code too long for the buffer comes as a
  // message instead (length -1).
  function waitForCode() {
    const control = new Int32Array(codeBuffer, 0, 2);
    Atomics.wait(control, 0, 0);
    const length = control[1];
    if (length >= 0) return run(decoder.decode(new Uint8Array(codeBuffer, 8, length).slice()));
    if (codeMessage !== null) return run(codeMessage); // it came before this thread started waiting
    codeByMessage = true;
  }
  // One handler for the worker's life (Deno stops delivering messages to a worker whose onmessage went null). The
  // message may arrive before or after the wait above ends: either way it runs once.
  let codeByMessage = false;
  let codeMessage = null;
  self.onmessage = (event) => {
    if (codeByMessage) {
      codeByMessage = false;
      run(event.data);
    } else if (codeMessage === null) {
      codeMessage = event.data;
    }
  };

  // Warm up, then report ready: V8 compiles functions lazily, on first call, and a pre-spawned run should not pay
  // for that (measured: ~3 ms of a ~4 ms run).
  evaluate("({warm: [1, 'x', null]})").then((value) => {
    stringify(jsonSafe(value));
    describeError(new Error("warm"));
    output = "";
    post("ready"); // queued to the main thread at once: this thread may block right after
    waitForCode();
  });
}

// --- the main thread: trusted ------------------------------------------------------------------------------
function text(value, limit) {
  return typeof value === "string" ? value.slice(0, limit) : "";
}

// The worker's message, as this realm's plain data, checked and capped: whatever the user's code did to its own
// realm (toJSON, getters, a replaced postMessage), the frame is one of the two documented shapes.
function payloadFrom(message) {
  if (message === null || typeof message !== "object") {
    return { error: "SandboxError: the code's result could not be read", output: "" };
  }
  const output = text(message.output, MAX_OUTPUT);
  const payload = typeof message.error === "string"
    ? { error: text(message.error, MAX_ERROR), output }
    : resultPayload(message.json, output);
  if (message.output_truncated === true || (typeof message.output === "string" && message.output.length > MAX_OUTPUT)) {
    payload.output_truncated = true;
  }
  return payload;
}

function resultPayload(json, output) {
  if (typeof json !== "string") return { error: "SandboxError: the code's result could not be read", output };
  if (json.length > MAX_RESULT_JSON) {
    return {
      result: json.slice(0, MAX_RESULT_JSON) + "…",
      output,
      result_truncated: `the result was ${json.length} characters; only the first ${MAX_RESULT_JSON} are shown`,
    };
  }
  try {
    return { result: parse(json), output };
  } catch (_) {
    return { error: "SandboxError: the code's result could not be read", output };
  }
}

function frameLine(payload) {
  try {
    return stringify(payload);
  } catch (err) {
    return stringify({ error: "SerializationError: the result could not be written", output: "" });
  }
}

const CODE_BUFFER_BYTES = 64 * 1024;
const workerUrl = URL.createObjectURL(
  new Blob([`self.onmessage = (event) => (${userRealm.toString()})(event.data);`], {
    type: "application/javascript",
  }),
);

// A worker for the next run, started and warmed while nothing runs; `answer` is set when its code is sent.
function startWorker() {
  const codeBuffer = new SharedArrayBuffer(8 + CODE_BUFFER_BYTES);
  const worker = new Worker(workerUrl, { type: "module", name: "user" });
  const run = { worker, codeBuffer, answer: null, finished: false };
  function settle(payload) {
    if (run.finished || run.answer === null) return;
    run.finished = true;
    run.answer(payload);
  }
  run.ready = new Promise((resolve) => {
    worker.onmessage = (event) => {
      if (event.data === "ready" && run.answer === null) return resolve();
      settle(payloadFrom(event.data));
    };
  });
  worker.onerror = (event) => {
    event.preventDefault(); // an error the code left uncaught (a rejected promise, a throw in a timer) ends the run
    settle({ error: `Uncaught: ${text(String(event.message), MAX_ERROR)}`, output: "" });
  };
  worker.onmessageerror = () => settle({ error: "SandboxError: the code's result could not be read", output: "" });
  worker.postMessage(codeBuffer);
  return run;
}

function execute(run, code) {
  return new Promise((resolve) => {
    run.answer = resolve;
    const control = new Int32Array(run.codeBuffer, 0, 2);
    const { read, written } = encoder.encodeInto(code, new Uint8Array(run.codeBuffer, 8));
    Atomics.store(control, 1, read === code.length ? written : -1);
    Atomics.store(control, 0, 1);
    Atomics.notify(control, 0);
    if (read !== code.length) run.worker.postMessage(code);
  });
}

// stdin as frames: a header line, then exactly that many bytes of code.
const decoder = new TextDecoder();
const input = stdinReadable.getReader();
let pending = new Uint8Array(0);
async function fill() {
  const { value, done } = await input.read();
  if (done) return false;
  const joined = new Uint8Array(pending.length + value.length);
  joined.set(pending);
  joined.set(value, pending.length);
  pending = joined;
  return true;
}
async function nextFrame() {
  let newline;
  while ((newline = pending.indexOf(10)) < 0) if (!(await fill())) return null;
  const [token, size] = decoder.decode(pending.subarray(0, newline)).split(" ");
  const length = Number(size);
  pending = pending.subarray(newline + 1);
  while (pending.length < length) if (!(await fill())) return null;
  const code = decoder.decode(pending.subarray(0, length));
  pending = pending.subarray(length);
  return { token, code };
}

let next = startWorker();
await next.ready;
stringify(payloadFrom({ json: '{"warm": [1]}', output: "" })); // compiled now, not during a run
writeAll(encoder.encode("R\n"));
for (let frame = await nextFrame(); frame !== null; frame = await nextFrame()) {
  const run = next;
  await run.ready;
  const payload = await execute(run, frame.code);
  run.worker.terminate(); // nothing of this run goes on: its timers, its realm
  writeAll(encoder.encode(frame.token + frameLine(payload) + "\n"));
  next = startWorker(); // only now: no two runs' workers exist at once
  await next.ready;
  writeAll(encoder.encode("R\n")); // ready for the next run
}
exit(0);
