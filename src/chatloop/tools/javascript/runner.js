// The sandbox runner: one Deno process runs one snippet, with no permissions at all.
//
// Protocol (stdin/stdout): the runner writes "R\n" when it is ready; the parent writes one line with a
// random token, then the code, and closes stdin; the runner writes exactly one line "<token><json>\n" and
// exits. User code cannot see the token (it lives in this module's scope, read before user code runs),
// so it cannot forge the result line.
//
// Result JSON: {"result": <json-safe value>, "output": "<console text>"} or {"error": "<Type>: <message>",
// "output": "..."}. JSON-safe mapping of values (also documented in the README):
//   undefined -> null (inside objects: key omitted), NaN / Infinity / -Infinity -> "NaN" / "Infinity" /
//   "-Infinity", BigInt -> decimal string, Map -> object of String(key) -> value, Set -> array,
//   Date -> ISO string, typed arrays -> arrays, Error -> "Type: message", function -> "[Function: name]",
//   symbol -> "Symbol(desc)", circular reference -> "[Circular]".

// Capture everything the runner needs before user code can replace it.
const stringify = JSON.stringify;
const exit = Deno.exit;
const inspect = Deno.inspect;
const stdinReadable = Deno.stdin.readable;
const stdout = Deno.stdout;
const writeSync = stdout.writeSync.bind(stdout);
const encoder = new TextEncoder();
function writeAll(bytes) {
  let offset = 0;
  while (offset < bytes.length) offset += writeSync(bytes.subarray(offset));
}
const AsyncFunction = (async () => {}).constructor;
const isArray = Array.isArray;
const objectKeys = Object.keys;
const MAX_OUTPUT = 64 * 1024;
const MAX_DEPTH = 32;

// Nothing may persist between runs or start threads.
for (const name of ["localStorage", "sessionStorage", "caches", "Worker"]) {
  try {
    delete globalThis[name];
  } catch (_) { /* non-configurable: ignore */ }
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
  if (output.length + line.length > MAX_OUTPUT) {
    output += line.slice(0, MAX_OUTPUT - output.length);
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

// `code` with its last statement returned, when that statement could be an expression: lets
// `const x = await f(); x + 1` report x + 1 in the async fallback. The caller compiles the candidate and
// falls back to the code as written if it does not parse.
const STATEMENT = /^(return|const|let|var|if|for|while|do|switch|try|function|class|throw|import|export)\b|^[}{]/;
function withReturnedLastStatement(code) {
  const trimmed = code.replace(/[\s;]+$/, "");
  const cut = Math.max(trimmed.lastIndexOf("\n"), trimmed.lastIndexOf(";"));
  const last = trimmed.slice(cut + 1).trim();
  if (!last || STATEMENT.test(last)) return null;
  return `${trimmed.slice(0, cut + 1)}\nreturn (${last});`;
}

function compileAsync(code) {
  const returning = withReturnedLastStatement(code);
  if (returning !== null) {
    try {
      return new AsyncFunction(returning);
    } catch (_) { /* the last line was not an expression after all */ }
  }
  return new AsyncFunction(code);
}

async function evaluate(code) {
  try {
    // Indirect eval: a script whose completion value is the last expression (`const x = 5; x * 2` -> 10).
    return await (0, eval)(code);
  } catch (err) {
    // Top-level `await` / `return` are not allowed in a script: nothing ran, so run it as an async body.
    if (err instanceof SyntaxError && /await|return/.test(err.message)) {
      return await compileAsync(code)();
    }
    throw err;
  }
}

writeAll(encoder.encode("R\n"));
const input = await new Response(stdinReadable).text();
const newline = input.indexOf("\n");
const token = input.slice(0, newline);
const code = input.slice(newline + 1);

let payload;
try {
  const value = await evaluate(code);
  payload = { result: jsonSafe(value), output };
} catch (err) {
  payload = { error: describeError(err), output };
}
if (outputTruncated) payload.output_truncated = true;
let line;
try {
  line = stringify(payload);
} catch (err) {
  line = stringify({ error: `SerializationError: ${err && err.message}`, output });
}
writeAll(encoder.encode(token + line + "\n"));
exit(0);
