"""SnapStart (chatloop/snapstart.py): the hooks called as the Lambda runtime and the Web Adapter call them, what
state exists before the snapshot and after a restore, and the hook routes refusing anything that is an invocation.

A restore is simulated by forking a process after its before-snapshot hooks ran: each child is one copy of the
snapshot, as two restored execution environments are."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from mangum import Mangum
from scripts.invoke_local import LocalContext
from starlette.testclient import TestClient

from chatloop import snapstart
from chatloop.api import create_app
from chatloop.api.app import route_paths, routes
from chatloop.api.runtime import Runtime
from chatloop.config import ConfigError, Settings
from chatloop.deadline import Deadline
from chatloop.providers import sdk
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.chain import FallbackChain
from chatloop.tools.javascript import sandbox as sandbox_module
from tests.support.adapter import MODEL, ROOT
from tests.support.events import rest_event
from tests.support.fake_llm import FakeLLM
from tests.support.models import ScriptedModel
from tests.support.wire_models import realistic

BEFORE, AFTER = "/_snapstart/before-checkpoint", "/_snapstart/after-restore"

# One snapshot, two restores: import app (SnapStart's init), the runtime's before-snapshot hooks in its order, the
# state the snapshot would hold, then two forks that each run the after-restore hooks and answer a turn.
SNAPSHOT_THEN_TWO_RESTORES = textwrap.dedent(
    r"""
    import gc, json, os, random, sys, threading, time, uuid
    sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1]]
    import snapshot_restore_py
    t = time.perf_counter()
    import app
    from chatloop.tools.javascript import lifecycle, sandbox
    from tests.support.events import rest_event
    from tests.support.processes import children_of
    from scripts.invoke_local import LocalContext

    def sockets():  # network sockets (TCP/UDP) this process holds; the event loop's own socketpair is not one
        inodes = set()
        for table in ("tcp", "tcp6", "udp", "udp6"):
            for row in open(f"/proc/self/net/{table}").read().splitlines()[1:]:
                inodes.add(row.split()[9])
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        return sum(link.startswith("socket:[") and link[8:-1] in inodes for link in links)

    registered = [len(snapshot_restore_py.get_before_snapshot()), len(snapshot_restore_py.get_after_restore())]
    from chatloop.lazy import ROUTES as lazy
    lazy_at_import = [m for m in lazy if m in sys.modules]
    for func, args, kwargs in reversed(snapshot_restore_py.get_before_snapshot()):  # as the runtime runs them
        func(*args, **kwargs)
    runtime = app.app.state.runtime
    from chatloop.providers import sdk, warmup
    tls = warmup._TLS
    primed_http = warmup._HTTP.get("groq")
    snapshot = {
        "registered": registered,
        "children": len(children_of()),
        "sockets": sockets(),
        "threads": threading.active_count(),
        "keys_read": runtime.models._keys is not None,
        "boto3": "boto3" in sys.modules,
        "groq_primed": "groq" in sys.modules,
        "lazy_at_import": lazy_at_import,
        "lazy_primed": all(m in sys.modules for m in lazy),
        "sandbox_built": runtime.tools._registry is not None,
        "spares": sum(box._spare is not None for box in lifecycle.live()),
        "sdk_clients": sum(len(clients) for clients in sdk._CLIENTS.values()),
        "tls_primed": tls is not None and len(tls.get_ca_certs()) > 0,
        "tls_used": None if tls is None else {k: v for k, v in tls.session_stats().items() if v},
        "http_primed": primed_http is not None,
        "http_headers_with_key": None if primed_http is None else sorted(
            name for name, value in primed_http.headers.items()
            if name.lower() in ("authorization", "api-key") or os.environ["GROQ_API_KEY"] in value
        ),
        "chunk_schema_built": "groq" in warmup._PRIMED,
        "body_validator_built": sys.modules["chatloop.api.turns.schemas"].ChatBody.__pydantic_complete__,
        "frozen": gc.get_freeze_count() > 0,
    }
    print("RESULT", json.dumps(snapshot), flush=True)
    frozen = random.getstate()
    for copy in range(2):
        read, write = os.pipe()
        if os.fork() == 0:  # one restored copy
            os.close(read)
            random.setstate(frozen)  # undo Python's at-fork reseed: a restore copies memory, it does not fork
            os.environ["GROQ_API_KEY"] = f"gsk_restored_copy_{copy}"  # this copy's key (the secret, on Lambda)
            for func, args, kwargs in snapshot_restore_py.get_after_restore():
                func(*args, **kwargs)
            time.sleep(0.2)
            # nothing competes with the first turn for the CPU before its model call is in flight
            early = {"children": len(children_of()), "spares": sum(box._spare is not None for box in lifecycle.live())}
            event = rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "5!"}], "stream": False})
            response = app.handler(event, LocalContext())
            deadline = time.monotonic() + 10
            while not any(box._spare is not None for box in lifecycle.live()) and time.monotonic() < deadline:
                time.sleep(0.01)
            spare = any(box._spare is not None for box in lifecycle.live())
            out = {"random": random.random(), "uuid": str(uuid.uuid4()), "early": early, "spare": spare,
                   "status": response["statusCode"], "body": response["body"]}
            os.write(write, json.dumps(out).encode())
            sandbox.close_all()
            os._exit(0)
        os.close(write)
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        os.wait()
        print("RESULT", b"".join(chunks).decode(), flush=True)
    """
)


@pytest.mark.slow
def test_two_restores_of_one_snapshot_are_their_own_and_answer_turns(tmp_path):
    with FakeLLM() as llm:
        llm.default = realistic
        env = {
            "PATH": os.environ["PATH"],
            "TMPDIR": str(tmp_path),
            "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "chatloop-test",
            "POWERTOOLS_METRICS_NAMESPACE": "ChatLoopTest",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "GROQ_API_KEY": "gsk_test_key_0000000000",
            "GROQ_BASE_URL": llm.groq_base_url,
            "MODEL_CHAIN": f"groq:{MODEL}",
        }
        done = subprocess.run(
            [sys.executable, "-c", SNAPSHOT_THEN_TWO_RESTORES, str(ROOT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        sent_keys = [r["headers"].get("Authorization") for r in llm.requests]
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.removeprefix("RESULT ") for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    snapshot, *restores = map(json.loads, lines)
    assert (
        snapshot
        == {
            "registered": [1, 1],  # by `import app`
            "children": 0,  # no Deno process in the snapshot
            "sockets": 0,  # no open connection
            "threads": 1,  # no idle thread or worker pool
            "keys_read": False,  # the provider keys are read after restore, on the first request
            "boto3": False,  # nor was the secret fetched
            "groq_primed": True,  # the chain's SDK is imported into the snapshot
            "lazy_at_import": [],  # `import app` leaves the Responses and Conversations APIs to their first request
            "lazy_primed": True,  # and the snapshot holds them, so a restored copy does not import them either
            "sandbox_built": True,  # the tool is built, without a process
            "spares": 0,
            "sdk_clients": 0,  # no SDK client: a client carries a key
            "tls_primed": True,  # the TLS context is built (CA certificates loaded, ~30 ms of CPU) ...
            "tls_used": {},  # ... and never used: no session, no connection, no handshake in it
            "http_primed": True,  # the keyless HTTP client a restored copy's first SDK client is built around ...
            "http_headers_with_key": [],  # ... carries no key
            "chunk_schema_built": True,  # the streamed chunk's schema is built
            "body_validator_built": True,  # and the request body's validator
            "frozen": True,  # the init's objects are out of the collector's way (gc.freeze)
        }
    )
    first, second = restores
    assert first["random"] != second["random"]  # re-seeded per restore: a fork copies the generator's state
    assert first["uuid"] != second["uuid"]
    for restored in restores:
        assert restored["early"] == {"children": 0, "spares": 0}  # no spare before the first model call
        assert restored["spare"]  # it started once the call was in flight (and was kept after the run)
        assert restored["status"] == 200 and "120" in restored["body"], restored
    # each copy read its own key after its restore: the snapshot's key was never sent
    assert sent_keys and set(sent_keys) == {"Bearer gsk_restored_copy_0", "Bearer gsk_restored_copy_1"}


def test_before_snapshot_leaves_no_process_key_or_client_and_after_restore_starts_the_spare(
    sandbox, fake_llm
):
    fake_llm.default = realistic
    keys = iter(["gsk_before_the_snapshot", "gsk_after_the_restore"])
    runtime = Runtime(Settings(model_chain=f"groq:{MODEL}"), keys_loader=lambda s: {"groq": next(keys)})
    turn = ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(20))

    async def one_call() -> None:
        async for _ in runtime.models.chain().stream(turn):
            pass

    asyncio.run(one_call())  # a request before the snapshot: a key read, an SDK client with a connection
    box = runtime.tools.registry().get("execute_javascript").sandbox
    try:
        box.warm()
        snapstart.before_snapshot(runtime)
        assert box._spare is None and not box._spare_starting
        assert runtime.models._keys is None and runtime.models._chain is None
        box.warm()  # suspended: a request before the restore would run cold, never leave a spare behind
        assert box._spare is None and not box._spare_starting
        assert box.run("6 * 7").payload["result"] == 42
        assert box._spare is None
        assert not any(sdk._CLIENTS.values())  # the client that held the key and the connection is gone
        snapstart.after_restore(runtime)
        assert box._spare is None and not box._spare_starting  # not yet: the first turn needs the CPU
        asyncio.run(one_call())
        assert box._refill is not None
        box._refill.join(10)
        assert box._spare is not None  # started once the model call was in flight
        sent = [r["headers"].get("Authorization") for r in fake_llm.requests]
        assert sent == ["Bearer gsk_before_the_snapshot", "Bearer gsk_after_the_restore"]  # read again
    finally:
        sandbox_module.resume_all()
        box.close()


def test_the_snapshot_primes_the_sdks_of_the_configured_chain():
    assert snapstart.sdk_modules(Settings(model_chain="groq:a,openai:b,groq:c")) == ["groq", "openai"]
    assert snapstart.sdk_modules(Settings(model_chain="local:m")) == ["openai"]
    assert snapstart.sdk_modules(Settings()) == ["groq", "openai"]  # the default chain
    deployed = Settings(
        model_chain="groq:a",
        provider_keys_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:keys",
        idempotency_table_name="table",
    )
    assert snapstart.primed_modules(deployed) == [
        "groq",
        "aws_lambda_powertools.utilities.parameters",  # boto3 for the secret: imported, never called
        "aws_lambda_powertools.utilities.idempotency",
    ]
    assert snapstart.primed_modules(Settings(model_chain="groq:a")) == ["groq"]
    traced = Settings(model_chain="groq:a", otel_exporter_otlp_endpoint="http://localhost:4318")
    assert snapstart.primed_modules(traced) == [
        "groq",
        "chatloop.tracing.turn",
    ]  # modules only: no exporter thread


def test_runtime_hooks_are_registered_only_where_the_runtime_provides_them(monkeypatch):
    import snapshot_restore_py  # type: ignore[import-untyped]

    runtime = Runtime(Settings())
    before = len(snapshot_restore_py.get_before_snapshot())
    assert snapstart.register_runtime_hooks(runtime)
    assert snapshot_restore_py.get_before_snapshot()[-1] == (snapstart.before_snapshot, (runtime,), {})
    assert snapshot_restore_py.get_after_restore()[-1] == (snapstart.after_restore, (runtime,), {})
    del snapshot_restore_py.get_before_snapshot()[before:]
    del snapshot_restore_py.get_after_restore()[before:]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # not on Lambda: an ImportError
    assert not snapstart.register_runtime_hooks(runtime)


# --- the Web Adapter's hook routes -----------------------------------------------------------------------------
class Spy:
    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        monkeypatch.setattr(snapstart, "before_snapshot", lambda runtime: self.calls.append("before"))
        monkeypatch.setattr(snapstart, "after_restore", lambda runtime: self.calls.append("after"))


def hooked_app():
    settings = Settings(snapstart_before_checkpoint_path=BEFORE, snapstart_after_restore_path=AFTER)
    return create_app(
        settings, chain=FallbackChain([ScriptedModel(lambda request, n: ModelResponse("", content="ok"))])
    )


def test_the_hook_routes_run_for_the_adapters_empty_post(monkeypatch):
    spy = Spy(monkeypatch)
    client = TestClient(hooked_app())
    assert client.post(BEFORE).status_code == 204
    assert client.post(AFTER).status_code == 204
    assert spy.calls == ["before", "after"]
    assert client.get(BEFORE).status_code == 405


@pytest.mark.parametrize("header", ["x-amzn-request-context", "x-amzn-lambda-context"])
def test_the_hook_routes_refuse_an_invocation_forwarded_by_the_adapter(monkeypatch, header):
    spy = Spy(monkeypatch)
    client = TestClient(hooked_app())
    for path in (BEFORE, AFTER):
        response = client.post(path, headers={header: json.dumps({"requestId": "r"})})
        assert response.status_code == 403
    assert spy.calls == []


def test_the_hook_routes_refuse_api_gateway_events_through_the_buffered_handler(monkeypatch):
    spy = Spy(monkeypatch)
    handler = Mangum(hooked_app(), lifespan="off")
    for path in (BEFORE, AFTER):
        response = handler(rest_event("POST", path, None), LocalContext())
        assert response["statusCode"] == 403
    assert spy.calls == []


def test_no_hook_route_unless_configured(monkeypatch):
    spy = Spy(monkeypatch)
    client = TestClient(
        create_app(
            Settings(),
            chain=FallbackChain([ScriptedModel(lambda request, n: ModelResponse("", content="ok"))]),
        )
    )
    assert client.post(BEFORE).status_code in (404, 405)
    assert spy.calls == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("/", AFTER),
        ("/snap%2fstart", AFTER),
        ("/health", AFTER),
        ("/v1/snapstart", AFTER),
        ("/events", AFTER),
        ("snapstart", AFTER),
        (AFTER, AFTER + "/"),
        ("/a/../", AFTER),
    ],
)
def test_hook_paths_must_be_dedicated_and_distinct(before, after):
    settings = Settings(snapstart_before_checkpoint_path=before, snapstart_after_restore_path=after)
    with pytest.raises(ConfigError):
        snapstart.check_hook_paths(settings, route_paths(routes(Settings())))


def test_the_reserved_paths_are_read_from_the_apps_own_routes():
    """What a hook may not take comes from the app's route table (no copy of it to drift): the routes' first
    segments, the adapter's pass-through path included, whatever it is configured to."""
    assert snapstart.reserved_paths(route_paths(routes(Settings()))) == [
        "/",
        "/chat",
        "/events",
        "/health",
        "/static",
        "/v1",
    ]
    moved = Settings(lwa_pass_through_path="/background-runs")
    assert "/background-runs" in snapstart.reserved_paths(route_paths(routes(moved)))
    hooks = Settings(
        lwa_pass_through_path="/background-runs",
        snapstart_before_checkpoint_path="/background-runs/before",
        snapstart_after_restore_path=AFTER,
    )
    with pytest.raises(ConfigError):
        create_app(
            hooks, chain=FallbackChain([ScriptedModel(lambda request, n: ModelResponse("", content="ok"))])
        )


@pytest.mark.slow
def test_stream_mode_runs_the_hooks_for_the_adapters_posts_and_refuses_invocations(tmp_path):
    """`run.sh` as the Web Adapter starts it under SnapStart: its empty POSTs run the hooks (no Deno process after
    the before-checkpoint one, the spare back once the first turn after the after-restore one calls its model); a
    forwarded invocation is refused."""
    from tests.support.adapter import adapter_headers, run_sh
    from tests.support.processes import children_of

    hooks = {
        "AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH": BEFORE,
        "AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH": AFTER,
        "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
    }
    with FakeLLM() as llm:
        llm.default = realistic
        with run_sh(llm, tmp_path, **hooks) as served:
            import httpx

            for path in (BEFORE, AFTER):
                refused = httpx.post(served.url + path, headers=adapter_headers(30), timeout=10)
                assert refused.status_code == 403
            assert httpx.post(served.url + BEFORE, timeout=30).status_code == 204
            assert children_of(served.process.pid) == set()  # no sandbox process in the snapshot
            assert httpx.post(served.url + AFTER, timeout=30).status_code == 204
            time.sleep(0.3)
            assert (
                children_of(served.process.pid) == set()
            )  # no spare until the first model call is in flight
            body = {"messages": [{"role": "user", "content": "5!"}], "stream": False}
            answer = httpx.post(f"{served.url}/chat", json=body, headers=adapter_headers(60), timeout=30)
            assert answer.status_code == 200 and "120" in answer.text
            deadline = time.monotonic() + 10
            while not children_of(served.process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert children_of(served.process.pid)  # the spare started during the turn, and stays
