"""A client-supplied MCP server is reached at the addresses that were checked, whatever its name answers later.

The resolver here is the process's own (``socket.getaddrinfo``), swapped for one that answers an allowed loopback
address the first time a name is looked up and something else after: a DNS rebinding attack. The "something else"
is either a second real listener on the same port of another loopback address (it must see no request at all), or
the cloud metadata address (the turn must still reach the checked server). Driven through the real handler, the
real groq SDK against the scripted upstream, and real MCP servers (tests/support/mcp_servers.py)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.fake_llm import Reply, text, tool_calls
from tests.support.handler import build_runtime
from tests.support.handler import post as invoke
from tests.support.mcp_servers import MCPTestServer, tools_server

MODEL = "llama-3.3-70b-versatile"
NAME = "rebind.test"


class RebindingResolver:
    """``socket.getaddrinfo`` for ``NAME``: ``first`` the first time, ``later`` every time after (other names are
    resolved as usual). ``asked`` counts the lookups of ``NAME``."""

    def __init__(self, first: list[str], later: list[str]):
        self.first, self.later, self.asked = first, later, 0
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if (host.decode() if isinstance(host, bytes) else host) != NAME:  # anyio asks with the IDNA bytes
            return self.real(host, port, *args, **kwargs)
        self.asked += 1
        answer = self.first if self.asked == 1 else self.later
        number = int(port or 0)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, number)) for a in answer]


def searching(body: dict[str, Any]) -> Reply:
    """Calls ``client__search`` once, then answers with what it got."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    if "client__search" in offered and not results:
        return tool_calls(body["model"], [("call_1", "client__search", '{"query": "rebind"}')], groq=True)
    return text(body["model"], f"Found: {results[-1] if results else 'nothing'}", groq=True)


Ask = Callable[[RebindingResolver, MCPTestServer, str], tuple[int, dict[str, Any]]]


@pytest.fixture
def ask(fake_llm, sandbox, app_runtime, monkeypatch) -> Ask:
    """``ask(resolver, server, path)``: the process resolving with ``resolver``, the app allowing ``NAME`` at
    ``server``'s port, one /v1/responses turn whose model searches ``http://NAME:<port><path>`` once."""

    def asking(resolver: RebindingResolver, server: MCPTestServer, path: str) -> tuple[int, dict[str, Any]]:
        monkeypatch.setattr(socket, "getaddrinfo", resolver)
        app_runtime.install(
            build_runtime(
                Settings(model_chain=f"groq:{MODEL}", mcp_allowed_urls=f"http://{NAME}:{server.port}/"),
                registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
                keys={"groq": "gsk_test0123456789", "openai": None},
            )
        )
        fake_llm.default = searching
        url = f"http://{NAME}:{server.port}{path}"
        tool = {"type": "mcp", "server_label": "client", "server_url": url, "require_approval": "never"}
        code, body = invoke("/v1/responses", {"input": "search for rebind", "tools": [tool]})
        return code, json.loads(body)

    return asking


def test_a_name_that_rebinds_to_another_listener_reaches_only_the_checked_address(ask: Ask) -> None:
    calls: list[str] = []
    # The checked server redirects its first path (an in-origin redirect the SDK follows): the redirected request
    # is a new request of the same connection and must go to the checked address too.
    checked = MCPTestServer(tools_server(calls=calls), redirect_from="/old/mcp", public_host=NAME)
    with (
        checked,
        MCPTestServer(tools_server(), bind="127.0.0.2", port=checked.port, public_host=NAME) as attacker,
    ):
        resolver = RebindingResolver(first=["127.0.0.1"], later=["127.0.0.2"])
        code, data = ask(resolver, checked, "/old/mcp")
    assert code == 200, data
    assert attacker.requests == []
    assert calls == ["rebind"] and "3 pages mention 'rebind'" in json.dumps(data["output"])
    assert {path for _, path, _ in checked.requests} == {"/old/mcp", "/mcp"}
    # The Host header is the URL's own name (the checked server's Host check accepts nothing else).
    assert set(checked.hosts) == {f"{NAME}:{checked.port}"}
    assert resolver.asked == 1  # resolved when the request was checked, never again


def test_a_name_that_rebinds_to_the_metadata_address_never_connects_there(ask: Ask) -> None:
    with MCPTestServer(tools_server(), public_host=NAME) as checked:
        resolver = RebindingResolver(first=["127.0.0.1"], later=["169.254.169.254"])
        code, data = ask(resolver, checked, "/mcp")
    assert code == 200, data
    assert "3 pages mention 'rebind'" in json.dumps(data["output"])
    # Listed, then called: every request at the checked address, the name resolved once.
    assert resolver.asked == 1 and len(checked.requests) >= 2


def test_every_address_a_name_has_is_checked(ask: Ask, fake_llm) -> None:
    with MCPTestServer(tools_server(), public_host=NAME) as checked:
        resolver = RebindingResolver(first=["127.0.0.1", "169.254.169.254"], later=["127.0.0.1"])
        code, data = ask(resolver, checked, "/mcp")
    assert code == 400 and "link-local or metadata" in data["error"]["message"]
    assert checked.requests == [] and fake_llm.requests == []


def test_the_pinned_transport_connects_to_the_checked_host_only():
    import httpx2

    from chatloop.pinning import pinned_transport

    async def fetch(url: str, addresses: tuple[str, ...]) -> int:
        async with httpx2.AsyncClient(transport=pinned_transport(NAME, addresses)) as http:
            return (await http.post(url, json={}, timeout=10)).status_code

    with MCPTestServer(tools_server(), public_host=NAME) as checked:
        # Reached by the pinned name at the pinned address (a 4xx: an empty object is not a JSON-RPC message).
        assert 400 <= asyncio.run(fetch(f"http://{NAME}:{checked.port}/mcp", ("127.0.0.1",))) < 500
        for url, addresses in [
            (f"http://other.test:{checked.port}/mcp", ("127.0.0.1",)),  # another host: refused
            (f"http://{NAME}:{checked.port}/mcp", ()),  # did not resolve when checked: refused
        ]:
            with pytest.raises(httpx2.ConnectError):
                asyncio.run(fetch(url, addresses))
    assert len(checked.requests) == 1


def test_over_tls_the_pinned_connection_names_the_checked_host_for_sni_and_the_certificate(
    tmp_path, monkeypatch
):
    """A TLS listener on 127.0.0.1 with a certificate for NAME only (from a CA the client is told to trust): the
    pinned connection reaches it by address, and the handshake succeeds only because SNI and the certificate check
    name NAME, not the address; the Host header is NAME's too."""
    import datetime
    import ssl
    import threading

    import httpx2
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from chatloop.pinning import pinned_transport

    def certificate(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> Any:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test CA", ca_key, "test CA", ca_key, ca=True)
    leaf = certificate(NAME, server_key, "test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "leaf.key").write_bytes(
        server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )

    seen: dict[str, str] = {}
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")

    def note_sni(sock: Any, name: str | None, ctx: Any) -> None:
        seen["sni"] = str(name)

    context.sni_callback = note_sni
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_once() -> None:
        listener.settimeout(10)
        with listener, context.wrap_socket(listener.accept()[0], server_side=True) as conn:
            request = conn.recv(65536).decode("latin-1")
            seen["host"] = next(
                line.split(":", 1)[1].strip()
                for line in request.split("\r\n")
                if line.lower().startswith("host:")
            )
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    server = threading.Thread(target=serve_once, daemon=True)
    server.start()
    monkeypatch.setenv(
        "SSL_CERT_FILE", str(tmp_path / "ca.pem")
    )  # the client trusts the test CA, nothing else

    async def fetch() -> str:
        async with httpx2.AsyncClient(transport=pinned_transport(NAME, ("127.0.0.1",))) as http:
            return (await http.get(f"https://{NAME}:{port}/mcp", timeout=10)).text

    assert asyncio.run(fetch()) == "ok"
    server.join(10)
    assert seen == {"sni": NAME, "host": f"{NAME}:{port}"}
