"""execute_javascript's sandbox: correct results, and every attack in shared/reference/js-sandbox.md §8 fails
safely (no secret leaks, nothing written, nothing connects, the parent survives, no process is left behind,
runaways end at their deadline)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from chatloop.deadline import Deadline
from chatloop.tools.javascript import ExecuteJavaScriptTool, JavaScriptSandbox
from chatloop.tools.javascript.sandbox import MAX_RESULT_CHARS, RUNNER
from chatloop.tools.javascript.tool import clamp_timeout
from tests.support.processes import children_of

CANARY = "canary-8f3a1c5e-do-not-leak"
KILL_MARGIN = 1.5
"""How late past its deadline a run may end here: these tests prove a runaway is ended at its deadline, not left to run
(the codes below run 60 s or forever); how soon is bench/sandbox.py's (~30-60 ms). 0.6 s failed once with five test
workers on two cores (1.93 s for a 1 s deadline). It stays under the ~2.7 s a run waiting for the busy slot would take
in test_waiting_for_a_slot_counts_against_the_deadline, so that test still tells the two apart."""


@pytest.fixture(scope="module", autouse=True)
def secret_in_parent_environment():
    saved = {k: os.environ.get(k) for k in ("AWS_SECRET_ACCESS_KEY", "GROQ_API_KEY")}
    os.environ["AWS_SECRET_ACCESS_KEY"] = CANARY
    os.environ["GROQ_API_KEY"] = CANARY
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def run(sandbox: JavaScriptSandbox, code: str, timeout: float = 3.0):
    before = children_of()
    result = sandbox.run(code, timeout)
    deadline = time.monotonic() + 2
    while True:  # the run's process is reaped in the background; a new spare may be starting meanwhile
        spare = sandbox._spare.process.pid if sandbox._spare else None
        leftover = children_of() - before - {spare}
        if (not leftover and not sandbox._spare_starting) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not leftover, f"processes left behind: {leftover}"
    text = result.content()
    assert CANARY not in text
    return result


# --- correctness ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("10000 * Math.pow(1.05, 15)", pytest.approx(20789.28, abs=0.01)),
        ("let f = 1; for (let i = 2; i <= 5; i++) f *= i; f", 120),
        (
            "const fib = [0, 1]; while (fib.length < 10) fib.push(fib.at(-1) + fib.at(-2)); fib",
            [0, 1, 1, 2, 3, 5, 8, 13, 21, 34],
        ),
        ("2n ** 100n", "1267650600228229401496703205376"),
        ("1/0", "Infinity"),
        ("const x = await Promise.resolve(41); return x + 1", 42),
        ("const x = await Promise.resolve(41); x + 1", 42),
        (
            "new Intl.NumberFormat('en-US', {style: 'currency', currency: 'USD'}).format(20789.28)",
            "$20,789.28",
        ),
        ("return 7", 7),
        ("const x = 5; x * 2", 10),
        ("[undefined, NaN, -Infinity, new Set([1, 2])]", [None, "NaN", "-Infinity", [1, 2]]),
        (
            "({a: undefined, m: new Map([['k', 1]]), d: new Date(0), f: function named() {}})",
            {"m": {"k": 1}, "d": "1970-01-01T00:00:00.000Z", "f": "[Function: named]"},
        ),
        ("const o = {name: 'o'}; o.self = o; o", {"name": "o", "self": "[Circular]"}),
    ],
)
def test_results(sandbox, code, expected):
    result = run(sandbox, code)
    assert result.ok, result.payload
    assert result.payload["result"] == expected


def test_thrown_type_error_is_a_failure_with_its_type(sandbox):
    result = run(sandbox, "null.property")
    assert result.payload["error"].startswith("TypeError: ")


def test_syntax_error_is_a_failure(sandbox):
    assert run(sandbox, "const = 3").payload["error"].startswith("SyntaxError")


def test_console_output_is_captured(sandbox):
    result = run(sandbox, "console.log('total', 3); console.error({a: 1}); 'done'")
    assert result.payload == {"result": "done", "output": "total 3\n{ a: 1 }\n"}


def test_oversized_result_is_truncated_and_says_so(sandbox):
    result = run(sandbox, "'x'.repeat(100000)")
    assert len(result.payload["result"]) <= MAX_RESULT_CHARS + 1 and "result_truncated" in result.payload


def test_a_forged_result_line_does_not_count(sandbox):
    code = 'Deno.stdout.writeSync(new TextEncoder().encode(\'{"result": "forged"}\\n\')); Deno.exit(0)'
    result = run(sandbox, code)
    assert not result.ok and "forged" not in json.dumps(result.payload.get("result"))


# --- the result channel: user code runs in its own realm and cannot touch the frame --------------------
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # Patching what the old runner used to write its frame: it learnt the token and forged any result.
        (
            "const seen = []; const enc = TextEncoder.prototype.encode;"
            "TextEncoder.prototype.encode = function (s) { seen.push(s); return enc.call(this, s) };"
            "Uint8Array.prototype.subarray = function () { return new Uint8Array() }; 7",
            7,
        ),
        ('JSON.stringify = () => \'{"result": "forged"}\'; 8', 8),
        # A value shaped like the runner's own protocol is a value, not an error.
        ("({error: {message: 'not really'}, output: 5})", {"error": {"message": "not really"}, "output": 5}),
        ("Object.prototype.toJSON = function () { return 'hijacked' }; 9", 9),
        ("self.postMessage({json: '[1, 2]'}); 10", [1, 2]),
    ],
    ids=[
        "patched encoder",
        "patched stringify",
        "protocol-shaped value",
        "toJSON on a number",
        "own postMessage",
    ],
)
def test_user_code_cannot_forge_or_break_the_result_frame(sandbox, code, expected):
    assert run(sandbox, code).payload["result"] == expected


@pytest.mark.parametrize(
    "code",
    [
        "Object.prototype.toJSON = function () { return 'x'.repeat(2 ** 20) }; ({a: 1, b: [1, 2]})",
        "Object.prototype.toJSON = function () { return {error: {nested: this}} }; ({a: 1})",
        "Object.defineProperty(Object.prototype, 'json', {get() { throw new Error('no') }}); ({a: 1})",
        "console.log('y'.repeat(60000)); 'x'.repeat(200000)",
        "throw new Error('e'.repeat(100000))",
        "String.fromCharCode(0xd800) + 'x'.repeat(20000)",
    ],
    ids=[
        "toJSON bomb",
        "recursive toJSON",
        "throwing getter",
        "huge output and result",
        "huge error",
        "surrogates",
    ],
)
def test_every_frame_is_a_capped_well_formed_tool_message(sandbox, code):
    result = run(sandbox, code)
    content = result.content()
    assert len(content.encode("utf-8")) <= 16 * 1024  # encodes: no lone surrogate survives
    payload = json.loads(content)
    assert isinstance(payload.get("error"), str) or "result" in payload
    assert isinstance(payload["output"], str)


def test_no_host_detail_is_visible():
    box = JavaScriptSandbox(prespawn=False)
    try:
        code = (
            "[typeof Deno, typeof globalThis.Deno, new Error('where').stack,"
            " (() => { try { return Deno.execPath() } catch (e) { return e.name } })()]"
        )
        kind, again, stack, exec_path = box.run(code, 3).payload["result"]
        assert kind == again == "undefined" and exec_path == "ReferenceError"
        for host_detail in (box.workdir, box.deno, str(RUNNER), str(Path.cwd()), tempfile.gettempdir()):
            assert host_detail not in stack
    finally:
        box.close()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("(await Promise.resolve({y: 3})).y", 3),
        ("const x = Promise.resolve({y: 4})\n(await x).y", 4),
        ("[await Promise.resolve(1), await Promise.resolve(2)].length", 2),
        ("Math.max(...(await Promise.all([1, 5, 3].map(async (n) => n))))", 5),
    ],
)
def test_top_level_await_works_inside_any_expression(sandbox, code, expected):
    assert run(sandbox, code).payload["result"] == expected


def sandbox_bytes(root: str, workdir: str) -> int:
    """Bytes under ``root`` that a sandbox run could have written: its own working directory and any Deno cache
    (the old runner's DENO_DIR was ``<tmp>/chatloop-deno-cache``). Other processes' files are not counted: a
    concurrent build or `make run` writes to the same folder."""
    total = 0
    for folder, _, files in os.walk(root):
        if "deno" not in folder.lower() and not folder.startswith(workdir):
            continue
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def test_imports_write_nothing_to_disk(sandbox):
    """The old runner let `import("data:...")` fill DENO_DIR under /tmp (~133 MB a run on Lambda's 512 MB)."""
    nonce = uuid.uuid4().hex  # new module text every time: a cache cannot already hold it
    code = (
        "Promise.all(Array.from({length: 40}, (_, i) =>"
        f" import('data:text/javascript,export default ' + i + '; // {nonce}' + 'x'.repeat(20000))))"
        ".then((modules) => modules.reduce((sum, m) => sum + m.default, 0))"
    )
    before = sandbox_bytes(tempfile.gettempdir(), sandbox.workdir)
    for _ in range(3):
        assert run(sandbox, code, timeout=8).payload["result"] == sum(range(40))
    grown = sandbox_bytes(tempfile.gettempdir(), sandbox.workdir) - before
    assert grown <= 1024 * 1024, f"the sandbox wrote {grown} bytes in 3 runs"  # the old runner: 6.4 MB
    assert not Path(sandbox.env["DENO_DIR"]).exists()


# --- attacks: secrets, files, network, processes ------------------------------------------------
@pytest.mark.parametrize(
    "code",
    [
        'Deno.env.get("AWS_SECRET_ACCESS_KEY")',
        "JSON.stringify(Deno.env.toObject())",
        "JSON.stringify(process.env)",
        'JSON.stringify((await import("node:process")).env)',
        "Deno.readTextFileSync(`/proc/${PPID}/environ`)",
        "await (await fetch(`file:///proc/${PPID}/environ`)).text()",
        'process.getBuiltinModule("module").createRequire("/")("fs").readFileSync("/etc/passwd", "utf8")',
        '(await import("file:///etc/hostname", {with: {type: "json"}})).default',
        'await (await fetch("file:///etc/passwd")).text()',
        'Deno.readDirSync("/").next()',
        'Deno.dlopen("libc.so.6", {getpid: {parameters: [], result: "i32"}})',
        "Deno.hostname()",
    ],
)
def test_no_secret_or_file_is_readable(sandbox, code):
    result = run(sandbox, code.replace("${PPID}", str(os.getpid())))
    assert not result.ok, result.payload
    assert "root:" not in result.content()


def test_nothing_is_written(sandbox, tmp_path):
    target = tmp_path / "pwned"
    for code in (
        f'Deno.writeTextFileSync("{target}", "x")',
        f'new Deno.Command("/bin/sh", {{args: ["-c", "touch {target}"]}}).outputSync()',
        '(await import("node:child_process")).execSync("id").toString()',
        f'(await import("node:fs")).writeFileSync("{target}", "x")',
    ):
        result = run(sandbox, code)
        assert not result.ok, (code, result.payload)
    assert not target.exists()


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted = []

    def accept():
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except (TimeoutError, OSError):
                if server.fileno() < 0:
                    return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()


def test_nothing_connects_to_a_loopback_listener(sandbox, listener):
    port, accepted = listener
    attacks = [
        f'await fetch("http://127.0.0.1:{port}/")',
        f'await Deno.connect({{hostname: "127.0.0.1", port: {port}}})',
        f'new WebSocket("ws://127.0.0.1:{port}/")',
        f'(await import("node:dgram")).createSocket("udp4").send("x", {port}, "127.0.0.1")',
        f'(await import("node:net")).connect({port}, "127.0.0.1")',
        'await (await import("node:dns")).promises.lookup("localhost")',
        'await fetch("http://127.0.0.1:9001/2018-06-01/runtime/invocation/next")',
    ]
    for code in attacks:
        run(sandbox, code, timeout=2)
    time.sleep(0.3)
    assert accepted == []


@pytest.mark.parametrize("specifier", ["https://esm.sh/lodash-es?leak=1", "npm:lodash", "jsr:@std/path"])
def test_remote_and_package_imports_are_refused(sandbox, specifier):
    result = run(sandbox, f'await import("{specifier}")')
    assert not result.ok


def test_other_processes_cannot_be_killed(sandbox):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for code in (
            f'Deno.kill({victim.pid}, "SIGKILL")',
            f'process.kill({victim.pid}, "SIGKILL")',
            f'process.kill({os.getpid()}, "SIGKILL")',
        ):
            run(sandbox, code)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_storage_does_not_persist_between_runs(sandbox):
    run(
        sandbox,
        'try { localStorage.setItem("k", "SECRET") } catch (e) {}; '
        'try { await (await caches.open("c")).put("http://a/", new Response("SECRET")) } catch (e) {}; 1',
    )
    result = run(sandbox, "[typeof localStorage, typeof caches, typeof sessionStorage, typeof Worker]")
    assert result.payload["result"] == ["undefined"] * 4


# --- attacks: runaways end at their deadline ------------------------------------------------------
@pytest.mark.parametrize(
    "code",
    [
        "while (true) {}",
        "await null; while (true) {}",
        "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60000)",
        "await new Promise(() => setInterval(() => {}, 1000))",
        '/^(a+)+$/.test("a".repeat(40) + "!")',
    ],
)
def test_runaways_are_killed_at_the_deadline(sandbox, code):
    start = time.monotonic()
    result = run(sandbox, code, timeout=1.0)
    elapsed = time.monotonic() - start
    assert result.payload["error"].startswith("TimeoutError"), result.payload
    assert elapsed < 1.0 + KILL_MARGIN


def test_a_promise_that_never_resolves_ends_at_its_deadline(sandbox):
    # The code runs in a worker, whose stalled promise Deno cannot detect as it does for a main module: the run
    # ends at its deadline. (The price of a result channel the code cannot reach.)
    start = time.monotonic()
    result = run(sandbox, "await new Promise(() => {})", timeout=1.0)
    assert result.payload["error"].startswith("TimeoutError") and time.monotonic() - start < 1.0 + KILL_MARGIN


@pytest.mark.parametrize(
    "code",
    [
        "const a = []; for (;;) a.push(new Array(1e5).fill(0))",
        "const a = []; for (;;) a.push(new Uint8Array(1e7).fill(1))",
        "new Uint8Array(new ArrayBuffer(2 ** 32)).fill(1)",
    ],
)
def test_memory_bombs_fail_cleanly(sandbox, code):
    result = run(sandbox, code, timeout=5.0)
    assert not result.ok and any(w in result.payload["error"] for w in ("Memory", "RangeError", "memory")), (
        result.payload
    )


def test_output_floods_are_capped(sandbox):
    flood = run(sandbox, "for (;;) Deno.stdout.writeSync(new Uint8Array(65536))", timeout=5)
    assert flood.payload["error"] == "ReferenceError: Deno is not defined"  # no stdout to flood
    logs = run(sandbox, "for (let i = 0; i < 100000; i++) console.log('x'.repeat(100)); 'finished'")
    assert logs.payload["result"] == "finished" and logs.payload.get("output_truncated")


def test_worker_bombs_fail(sandbox):
    code = (
        'const u = URL.createObjectURL(new Blob(["for(;;){}"])); '
        'for (let i = 0; i < 200; i++) new Worker(u, {type: "module"})'
    )
    assert not run(sandbox, code, timeout=2).ok
    assert not run(
        sandbox, 'new (await import("node:worker_threads")).Worker("for(;;){}", {eval: true})', timeout=2
    ).ok


# --- the spare and the tool ------------------------------------------------------------------------
def wait_for_spare(box: JavaScriptSandbox) -> None:
    box.warm()
    deadline = time.monotonic() + 5
    while box._spare is None and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_dead_spare_is_replaced_by_a_cold_spawn():
    box = JavaScriptSandbox()
    try:
        wait_for_spare(box)
        os.killpg(box._spare.process.pid, 9)
        box._spare.process.wait()
        result = box.run("1 + 1", 3)
        assert result.payload["result"] == 2 and not result.prespawned
    finally:
        box.close()


def test_the_spare_is_used_when_ready():
    box = JavaScriptSandbox()
    try:
        wait_for_spare(box)
        assert box.run("2 + 2", 3).prespawned
    finally:
        box.close()


def test_parallel_runs_are_concurrent_and_bounded(sandbox):
    results = [None] * 6
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, sandbox.run(f"{i} * 2", 3)))
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.payload["result"] for r in results] == [0, 2, 4, 6, 8, 10]


@pytest.mark.parametrize(
    ("given", "clamped"), [(None, 5.0), (0, 1.0), (0.2, 1.0), (7, 7.0), (60, 10.0), ("x", 5.0)]
)
def test_timeout_is_clamped(given, clamped):
    assert clamp_timeout(given) == clamped


async def test_the_tool_never_outlives_the_turn_deadline(sandbox):
    tool = ExecuteJavaScriptTool(sandbox)
    start = time.monotonic()
    result = await tool.run({"code": "while(true){}", "timeout_seconds": 10}, Deadline.after(1.2))
    assert not result.ok and time.monotonic() - start < 1.2 + KILL_MARGIN
    assert not (await tool.run({"code": "   "}, Deadline.after(5))).ok


def test_the_child_environment_is_minimal(sandbox):
    assert set(sandbox.env) == {"DENO_DIR", "NO_COLOR", "DENO_NO_UPDATE_CHECK"}
    assert sandbox.env["DENO_DIR"].startswith("/dev/null/") and "--no-code-cache" in sandbox.command
    assert not any(a.startswith("--allow") for a in sandbox.command) and "eval" not in sandbox.command


def test_waiting_for_a_slot_counts_against_the_deadline():
    """With every slot taken, a run that cannot start before its request's deadline is an error at that deadline,
    not a run that starts late (3 concurrent requests once overran their deadline by 2.2 s)."""
    box = JavaScriptSandbox(max_concurrency=1, prespawn=False)
    try:
        busy = threading.Thread(target=box.run, args=("while (true) {}", 3.0))
        busy.start()
        time.sleep(0.3)  # the slot is taken
        start = time.monotonic()
        result = box.run("1 + 1", 5.0, not_after=start + 0.5)
        assert result.payload["error"].startswith("SandboxBusyError")
        assert time.monotonic() - start < 0.5 + KILL_MARGIN
        busy.join()
        assert box.run("1 + 1", 5.0, not_after=time.monotonic() + 5).payload["result"] == 2
    finally:
        box.close()


@pytest.mark.parametrize(
    "code",
    ["40 + 2 // " + "x" * 100_000, "const s = '" + "é" * 40_000 + "'; s.length === 40000 ? 42 : s.length"],
    ids=["100 KB of ASCII", "80 KB of UTF-8"],
)
def test_code_longer_than_the_shared_buffer_still_runs(sandbox, code):
    """Code reaches the worker through a 64 KiB shared buffer; longer code comes as a message instead."""
    assert run(sandbox, code, timeout=5).payload["result"] == 42


# --- one process, a fresh realm per run (#27) ------------------------------------------------------
def test_a_process_serves_run_after_run_and_nothing_of_one_run_reaches_the_next():
    box = JavaScriptSandbox()
    try:
        wait_for_spare(box)
        pid = box._spare.process.pid
        leave = (
            "globalThis.left = 'SECRET'; Object.prototype.polluted = 'SECRET'; Math.random = () => 4; "
            "JSON.stringify = () => '{\"forged\": 1}'; setInterval(() => console.log('SECRET'), 1); 1"
        )
        assert box.run(leave, 3).payload["result"] == 1
        wait_for_spare(box)
        assert box._spare is not None and box._spare.process.pid == pid  # the same process answers again
        seen = box.run(
            "[typeof globalThis.left, ({}).polluted, Math.random() === 4, JSON.stringify({a: 1}), "
            "typeof BroadcastChannel, typeof URL.createObjectURL]",
            3,
        )
        wait_for_spare(box)
        assert seen.prespawned and box._spare.process.pid == pid
        assert seen.payload == {
            "result": ["undefined", None, False, '{"a":1}', "undefined", "undefined"],
            "output": "",  # the previous run's timer died with its worker
        }
    finally:
        box.close()


def test_a_run_that_does_not_answer_gets_a_new_process():
    box = JavaScriptSandbox()
    try:
        wait_for_spare(box)
        pid = box._spare.process.pid
        assert box.run("while (true) {}", 1).payload["error"].startswith("TimeoutError")
        wait_for_spare(box)
        assert box._spare.process.pid != pid
        assert box.run("2 + 2", 3).payload["result"] == 4
    finally:
        box.close()


def test_the_cpu_limit_holds_for_each_run_of_a_long_lived_process():
    """RLIMIT_CPU counts the process's whole life: each run's budget is added to what it has used so far."""
    box = JavaScriptSandbox()
    try:
        wait_for_spare(box)
        for _ in range(3):
            busy = "const end = Date.now() + 700; while (Date.now() < end) {} 'done'"
            assert box.run(busy, 1.5).payload["result"] == "done"
    finally:
        box.close()


def test_a_process_is_replaced_after_its_share_of_runs():
    box = JavaScriptSandbox()
    box.runs_per_process = 3
    try:
        wait_for_spare(box)
        first = box._spare.process.pid
        pids = []
        for n in range(4):
            assert box.run(f"{n} + 1", 3).payload["result"] == n + 1
            wait_for_spare(box)
            pids.append(box._spare.process.pid)
        assert pids[:2] == [first, first] and pids[2] != first  # replaced after its third run
    finally:
        box.close()
