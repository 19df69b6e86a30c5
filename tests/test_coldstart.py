"""The first turn's path (issue #34): what a cold start does before its first model call, and what it leaves for the
time that call waits on the network.

- ``import app`` turns off pydantic's plugin discovery (it reads every installed distribution's metadata) and
  httpx's command-line client (it loads click for nothing);
- the sandbox's spare Deno process starts once the first model call is in flight, not before it;
- the streamed chunk's schema is built while that call waits (in a SnapStart snapshot: before it);
- one TLS context serves every SDK client; a primed keyless HTTP client is used once, by the first client; the
  layer's hashed CA directory trusts what certifi's bundle trusts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from chatloop import coldstart
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers import warmup
from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta
from tests.support.adapter import MODEL, ROOT
from tests.support.wire_models import realistic


def test_import_app_turns_off_pydantic_plugin_discovery_and_httpx_cli_unless_the_operator_set_it():
    code = (
        "import json, os, sys; sys.path[:0] = [sys.argv[1] + '/src']; import app; "
        "from chatloop.api.turns.schemas import ChatBody; "
        "ChatBody.model_validate({'messages': [{'role': 'user', 'content': 'hi'}]}); "
        "from pydantic.plugin import _loader; "
        "lazy = sorted(m for m in ('groq', 'openai', 'boto3', 'mcp') if m in sys.modules); "
        "import groq, httpx; "
        "print(json.dumps([os.environ['PYDANTIC_DISABLE_PLUGINS'], _loader._plugins is None, lazy, "
        "'click' in sys.modules, callable(httpx.main)]))"
    )
    base = {"PATH": "/usr/bin:/bin", "POWERTOOLS_SERVICE_NAME": "t", "POWERTOOLS_LOG_LEVEL": "ERROR"}
    for env, expected in (
        # no distribution's metadata read; no SDK imported by `import app`; the SDK's httpx loads no CLI (click)
        (base, ["__all__", True, [], False, True]),
        # the operator's choice stands
        ({**base, "PYDANTIC_DISABLE_PLUGINS": "logfire"}, ["logfire", False, [], False, True]),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, str(ROOT)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == expected


GC_PROBE = """
import gc, json, sys
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1]]
START = gc.get_freeze_count()  # the interpreter's own (375 in 3.12)
import app
from chatloop import coldstart
from tests.support.events import FakeContext, rest_event

def state():
    return [coldstart.phase(), gc.isenabled(), gc.get_freeze_count() - START, gc.get_threshold()[0]]

states = [state()]
body = {"messages": [{"role": "user", "content": "hi"}], "stream": False}
response = app.handler(rest_event("POST", "/chat", body), FakeContext())
states.append(state())
print(json.dumps([response["statusCode"], states]))
"""


@pytest.mark.slow
def test_on_lambda_the_imports_are_frozen_out_of_the_collector_until_the_first_model_call(fake_llm):
    """``import app`` runs with the collector off and freezes what it built; the first turn's imports run with a
    larger first generation; once its model call is on the wire the usual thresholds are back. Off Lambda (tests,
    make run) nothing changes."""
    fake_llm.default = realistic
    base = {
        "PATH": "/usr/bin:/bin",
        "POWERTOOLS_SERVICE_NAME": "t",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "POWERTOOLS_METRICS_NAMESPACE": "t",
        "GROQ_API_KEY": "gsk_test",
        "GROQ_BASE_URL": fake_llm.groq_base_url,
        "MODEL_CHAIN": f"groq:{MODEL}",
    }
    results = {}
    for where, env in (("lambda", {**base, "AWS_LAMBDA_FUNCTION_NAME": "chatloop-test"}), ("local", base)):
        done = subprocess.run(
            [sys.executable, "-c", GC_PROBE, str(ROOT)], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results[where] = json.loads(done.stdout.strip().splitlines()[-1])
    status, (imported, answered) = results["lambda"]
    assert status == 200
    phase, enabled, frozen, threshold = imported
    assert (phase, enabled, threshold) == ("first turn", True, coldstart.FIRST_TURN_THRESHOLD)
    assert frozen > 20_000  # what import app built: not walked by the collector again
    assert answered[0] == "settled" and answered[1] is True and answered[3] == 700  # Python's default again
    status, (imported, answered) = results["local"]
    assert status == 200 and imported == answered == ["off", True, 0, 700]


@pytest.mark.slow
def test_the_spare_starts_once_the_first_model_call_is_in_flight(fake_llm):
    fake_llm.default = realistic
    runtime = Runtime(Settings(model_chain=f"groq:{MODEL}"), keys_loader=lambda s: {"groq": "gsk_test"})
    box = runtime.tools.registry().get("execute_javascript").sandbox
    seen: dict[str, bool] = {}

    def at_send(body: dict) -> object:
        # the upstream has the request and has not answered: the spare starts while the model works
        deadline = time.monotonic() + 5
        while not (box._spare_starting or box._spare is not None) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["starting"] = box._spare_starting or box._spare is not None
        return realistic(body)

    fake_llm.default = at_send
    try:
        assert (
            box._spare is None and not box._spare_starting
        )  # built for the turn's tool list: no process yet
        turn = ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(20))

        async def one_call() -> None:
            async for _ in runtime.models.chain().stream(turn):
                pass

        asyncio.run(one_call())
        assert seen == {"starting": True}
        assert box._refill is not None
        box._refill.join(10)
        assert box._spare is not None
    finally:
        box.close()


def test_the_chunk_schema_is_built_while_the_first_call_waits(fake_llm, monkeypatch):
    """On a cold start nothing primed the SDK: its first call builds the streamed chunk's schema in the background
    (the SDK would build it on the first chunk, once the model has answered: on the turn's path)."""
    fake_llm.default = realistic
    monkeypatch.setattr(warmup, "_PRIMED", set())
    built = []
    monkeypatch.setattr(warmup, "prime_modules", built.append)
    runtime = Runtime(Settings(model_chain=f"groq:{MODEL}"), keys_loader=lambda s: {"groq": "gsk_test"})
    turn = ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(20))

    async def one_call() -> None:
        async for _ in runtime.models.chain().stream(turn):
            pass

    asyncio.run(one_call())
    asyncio.run(one_call())
    for thread in [t for t in threading.enumerate() if t.name == "sdk-prime"]:
        thread.join(10)
    assert built == ["groq"]  # once per process (and no second HTTP client: the call has its own)


def test_a_first_answer_that_comes_before_the_chunk_schema_is_built_waits_for_it_not_builds_it_again(
    fake_llm, monkeypatch
):
    """A fast model (or a small CPU share) answers while the priming thread still builds the chunk schema: the
    chunks are read once it is done, so the SDK does not build the same schema a second time on the turn's path."""
    fake_llm.default = realistic  # answers at once
    monkeypatch.setattr(warmup, "_PRIMED", set())
    monkeypatch.setattr(warmup, "_PRIMING", {})
    order: list[str] = []

    def slow_prime(sdk_module: str) -> None:
        time.sleep(0.4)  # still building when the answer starts
        order.append("primed")

    monkeypatch.setattr(warmup, "prime_modules", slow_prime)
    runtime = Runtime(Settings(model_chain=f"groq:{MODEL}"), keys_loader=lambda s: {"groq": "gsk_test"})
    turn = ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(20))

    async def one_call() -> None:
        async for item in runtime.models.chain().stream(turn):
            # what the model's chunks made (the chain also says which model it tries, before any chunk)
            if isinstance(item, (TextDelta, ModelResponse)) and (not order or order[-1] != "chunk"):
                order.append("chunk")

    asyncio.run(one_call())
    assert order[0] == "primed" and "chunk" in order  # no chunk was read before the schema was ready
    assert warmup._PRIMING == {}  # done with: a later call does not look for it


def test_every_client_shares_one_tls_context_and_the_primed_http_client_is_used_once(monkeypatch):
    monkeypatch.setattr(warmup, "_HTTP", {})
    warmup.prime("groq")
    primed = warmup._HTTP["groq"]
    assert "authorization" not in {k.lower() for k in primed.headers}  # keyless
    first, second, other = (
        warmup.http_client("groq"),
        warmup.http_client("groq"),
        warmup.http_client("openai"),
    )
    assert first is primed and second is not primed
    contexts = {id(c._transport._pool._ssl_context) for c in (first, second, other)}
    assert contexts == {id(warmup.tls_context())}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the layer's CA directory is hashed with openssl")
def test_the_layers_hashed_ca_directory_trusts_exactly_the_bundles_cas(tmp_path):
    """``scripts/package.py`` ships certifi's bundle as a hashed directory too, so the TLS context loads the CA a
    handshake needs instead of parsing every CA as it is made: the same trust, checked with real handshakes."""
    import ssl

    import trustme
    from scripts.package import hash_ca_bundle

    trusted, other, unrelated = trustme.CA(), trustme.CA(), trustme.CA()
    (tmp_path / "certifi").mkdir()
    bundle = trusted.cert_pem.bytes() + other.cert_pem.bytes()
    (tmp_path / "certifi" / "cacert.pem").write_bytes(bundle)
    hashed = hash_ca_bundle(tmp_path)
    assert hashed is not None and len(list(hashed.iterdir())) == 2
    context = ssl.create_default_context(capath=str(hashed))

    def handshake(ca: trustme.CA) -> bool:
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("localhost").configure_cert(server_context)
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]

            def serve() -> None:
                conn, _ = listener.accept()
                with (
                    contextlib.suppress(ssl.SSLError, OSError),
                    server_context.wrap_socket(conn, server_side=True),
                ):
                    pass

            thread = threading.Thread(target=serve, daemon=True)
            thread.start()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                    context.wrap_socket(raw, server_hostname="localhost").close()
                return True
            except ssl.SSLCertVerificationError:
                return False
            finally:
                thread.join(10)

    assert handshake(trusted) and handshake(other)
    assert not handshake(unrelated)  # a CA not in the bundle is not trusted


def test_the_tls_context_takes_the_hashed_ca_directory_beside_certifi_unless_the_environment_names_cas(
    tmp_path, monkeypatch
):
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "certifi").mkdir()
    (tmp_path / "certifi" / "__init__.py").write_text("")
    assert warmup._hashed_ca_dir() is None  # the venv's certifi has none beside it: the bundle is loaded
    (tmp_path / warmup.CA_DIR).mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "certifi", raising=False)
    assert warmup._hashed_ca_dir() == tmp_path / warmup.CA_DIR  # as in the layer
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "mine.pem"))
    assert warmup._hashed_ca_dir() is None  # the operator's CAs, as httpx honours them


@pytest.mark.slow
def test_a_run_takes_the_spare_that_is_still_starting_rather_than_start_another():
    """The spare starts once the model call is in flight; a model that answers fast can ask for a run before it is
    ready. The run waits for it: one Deno process starting, not two sharing the CPU."""
    from chatloop.tools.javascript import JavaScriptSandbox

    box = JavaScriptSandbox()
    spawned = []
    spawn = box._spawn

    def counted():
        spawned.append(1)
        return spawn()

    box._spawn = counted
    try:
        box.warm()
        assert box._spare_starting  # not ready yet
        result = box.run("6 * 7")
        assert result.payload["result"] == 42 and result.prespawned
        assert len(spawned) == 1
    finally:
        box.close()
