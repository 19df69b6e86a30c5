"""Webhooks cannot be steered (issue #41): the sender follows no redirect, and WEBHOOK_URL is checked against the
address policy MCP uses (``chatloop.netpolicy``) when the handler starts and again at every send, resolved once and
connected to the checked address.

Receivers are real HTTP servers on loopback addresses (``WEBHOOK_ALLOW_PRIVATE`` lets the sender reach them); a
name's answers come from the process's resolver swapped for a scripted one, as in tests/tools/test_mcp_pinning.py.
The redirect to the metadata address is followed (or not) inside a network namespace of the test's own, where
169.254.169.254 is a decoy listener."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.mcp_servers import checked_addresses
from chatloop.api.runs import webhooks
from chatloop.config import ConfigError, Settings
from tests.support.repo import ROOT

SECRET = "whsec_" + base64.b64encode(b"a webhook secret of 32 bytes....").decode()
NAME = "hooks.rebind.test"
IP = shutil.which("ip") or "ip"  # the full path where there is one
METADATA = ["169.254.169.254", "169.254.170.2", "fd00:ec2::254"]


class Receiver:
    """An HTTP server on ``host`` that records each request (method, path, Host header) and answers ``status``
    (with ``location`` when it is a redirect)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, status: int = 200, location: str = "") -> None:
        self.requests: list[tuple[str, str, str]] = []
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                seen.append((self.command, self.path, self.headers.get("host", "")))
                self.send_response(status)
                if location:
                    self.send_header("location", location)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = answer

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class ScriptedResolver:
    """``socket.getaddrinfo`` answering ``NAME`` with ``first``, then ``later`` (other names as usual)."""

    def __init__(self, first: list[str], later: list[str] | None = None) -> None:
        self.first, self.later, self.asked = first, later if later is not None else first, 0
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if (host.decode() if isinstance(host, bytes) else host) != NAME:
            return self.real(host, port, *args, **kwargs)
        self.asked += 1
        answer = self.first if self.asked == 1 else self.later
        family = {4: socket.AF_INET, 6: socket.AF_INET6}
        return [
            (family[6 if ":" in a else 4], socket.SOCK_STREAM, 6, "", (a, int(port or 0))) for a in answer
        ]


def settings_for(url: str, allow_private: bool = True) -> Settings:
    return Settings(webhook_url=url, webhook_secret=SECRET, webhook_allow_private=allow_private)


def send(settings: Settings) -> None:
    asyncio.run(webhooks.notify(settings, "resp_1", "completed"))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


# --- redirects ----------------------------------------------------------------------------------------------
def test_a_redirect_is_a_failed_delivery_and_its_target_hears_nothing(caplog):
    caplog.set_level("INFO")
    with Receiver("127.0.0.2") as decoy:
        target = f"http://127.0.0.2:{decoy.port}/latest/meta-data/iam/security-credentials/"
        with Receiver(status=302, location=target) as receiver:
            send(settings_for(f"http://127.0.0.1:{receiver.port}/hooks"))
    assert [r[:2] for r in receiver.requests] == [("POST", "/hooks")]
    assert decoy.requests == []
    assert any("not delivered" in line and "302" in line for line in warnings(caplog)), caplog.text


NAMESPACE_DECOY = """
import asyncio, base64, json, sys
sys.path[:0] = [{root!r}, {src!r}]
from tests.api.runs.test_webhooks import Receiver, settings_for
from chatloop.api.runs import webhooks
with Receiver("169.254.169.254", 80) as decoy:
    with Receiver(status=302, location="http://169.254.169.254/latest/meta-data/iam/security-credentials/") as hook:
        asyncio.run(webhooks.notify(settings_for(f"http://127.0.0.1:{{hook.port}}/hooks"), "resp_1", "completed"))
print(json.dumps({{"receiver": hook.requests, "decoy": decoy.requests}}))
"""


@pytest.fixture
def namespace() -> Iterator[str]:
    """A network namespace of this test's own (its loopback up, 169.254.169.254 on it), deleted afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command: network namespaces are unavailable here")
    name = f"chatloop-webhooks-{uuid.uuid4().hex[:8]}"
    added = subprocess.run([IP, "netns", "add", name], capture_output=True, text=True)
    if added.returncode != 0:
        pytest.skip(f"`ip netns add` is unavailable (root and CAP_SYS_ADMIN needed): {added.stderr.strip()}")
    try:
        for command in (
            [IP, "link", "set", "lo", "up"],
            [IP, "addr", "add", "169.254.169.254/32", "dev", "lo"],
        ):
            subprocess.run([IP, "netns", "exec", name, *command], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run([IP, "netns", "delete", name], capture_output=True)


@pytest.mark.slow
def test_a_redirect_to_the_metadata_address_is_not_followed(namespace):
    """In a namespace where 169.254.169.254 answers (a decoy): the receiver's 302 there reaches nothing."""
    script = NAMESPACE_DECOY.format(root=str(ROOT), src=str(ROOT / "src"))
    done = subprocess.run(
        [IP, "netns", "exec", namespace, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r[:2] for r in seen["receiver"]] == [["POST", "/hooks"]]
    assert seen["decoy"] == []


# --- the address, at start ----------------------------------------------------------------------------------
@pytest.mark.parametrize("address", METADATA)
def test_a_metadata_address_is_refused_at_start_even_with_private_receivers_allowed(address):
    host = f"[{address}]" if ":" in address else address
    for allow in ("true", "false"):
        env = {
            "WEBHOOK_URL": f"http://{host}/hooks",
            "WEBHOOK_SECRET": SECRET,
            "WEBHOOK_ALLOW_PRIVATE": allow,
        }
        with pytest.raises(ConfigError, match="WEBHOOK_URL"):
            Settings.from_env(env)


@pytest.mark.parametrize("address", METADATA)
def test_a_name_that_resolves_to_a_metadata_address_is_refused_at_start(address, monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", ScriptedResolver(["203.0.113.9", address]))
    env = {"WEBHOOK_URL": f"https://{NAME}/hooks", "WEBHOOK_SECRET": SECRET, "WEBHOOK_ALLOW_PRIVATE": "true"}
    with pytest.raises(ConfigError, match="WEBHOOK_URL"):
        Settings.from_env(env)


def test_a_private_receiver_needs_the_opt_in():
    for url in ("http://127.0.0.1:8080/hooks", "http://10.1.2.3/hooks", "http://[::1]:9/hooks"):
        env = {"WEBHOOK_URL": url, "WEBHOOK_SECRET": SECRET}
        with pytest.raises(ConfigError, match="WEBHOOK_ALLOW_PRIVATE"):
            Settings.from_env(env)
        assert Settings.from_env({**env, "WEBHOOK_ALLOW_PRIVATE": "true"}).webhook_url == url
    assert Settings.from_env({"WEBHOOK_URL": "https://1.1.1.1/hooks", "WEBHOOK_SECRET": SECRET}).webhook_url


# --- the address, at send -----------------------------------------------------------------------------------
def test_a_name_that_resolves_to_a_refused_address_at_send_is_not_sent(monkeypatch, caplog):
    caplog.set_level("INFO")
    with Receiver() as receiver:
        # Started fine (a public address), then the name answers the metadata address beside the receiver's.
        resolver = ScriptedResolver(["1.1.1.1"], later=["127.0.0.1", "169.254.169.254"])
        monkeypatch.setattr(socket, "getaddrinfo", resolver)
        env = {"WEBHOOK_URL": f"http://{NAME}:{receiver.port}/hooks", "WEBHOOK_SECRET": SECRET}
        settings = Settings.from_env({**env, "WEBHOOK_ALLOW_PRIVATE": "true"})
        send(settings)
    assert receiver.requests == []
    assert any("not sent" in line and "metadata" in line for line in warnings(caplog)), caplog.text


def test_the_name_is_resolved_once_a_send_and_the_checked_address_is_the_one_connected(monkeypatch):
    with Receiver() as receiver, Receiver("127.0.0.2", receiver.port) as other:
        resolver = ScriptedResolver(["127.0.0.1"], later=["127.0.0.2"])
        monkeypatch.setattr(socket, "getaddrinfo", resolver)
        send(settings_for(f"http://{NAME}:{receiver.port}/hooks"))
    assert resolver.asked == 1 and other.requests == []
    assert receiver.requests == [("POST", "/hooks", f"{NAME}:{receiver.port}")]  # the name's own Host header


def test_a_private_receiver_is_not_sent_to_without_the_opt_in(caplog):
    caplog.set_level("INFO")
    with Receiver() as receiver:
        send(settings_for(f"http://127.0.0.1:{receiver.port}/hooks", allow_private=False))
    assert receiver.requests == []
    assert any("WEBHOOK_ALLOW_PRIVATE" in line for line in warnings(caplog)), caplog.text


# --- one policy for MCP and webhooks ------------------------------------------------------------------------
def _spellings() -> Any:
    """(the IPv4 address, one way a URL may spell it)."""
    from hypothesis import strategies as st

    addresses = st.one_of(
        st.sampled_from(
            ["169.254.169.254", "169.254.170.2", "100.100.100.200", "127.0.0.1", "10.0.0.1", "1.1.1.1"]
        ),
        st.tuples(st.just(169), st.just(254), st.integers(0, 255), st.integers(0, 255)).map(
            lambda t: ".".join(map(str, t))
        ),
        st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t))),
    )

    def spelled(address: str, form: str) -> tuple[str, str]:
        octets = [int(o) for o in address.split(".")]
        number = int.from_bytes(bytes(octets), "big")
        return address, {
            "dotted": address,
            "decimal": str(number),
            "octal": ".".join(f"0{o:o}" for o in octets),
            "hex": ".".join(f"0x{o:x}" for o in octets),
            "mapped": f"[::ffff:{address}]",
            "mapped-hex": f"[::ffff:{number >> 16:x}:{number & 0xFFFF:x}]",
            "mapped-long": f"[0:0:0:0:0:FFFF:{address}]",
        }[form]

    forms = st.sampled_from(["dotted", "decimal", "octal", "hex", "mapped", "mapped-hex", "mapped-long"])
    return st.builds(spelled, addresses, forms)


def test_mcp_and_webhooks_refuse_the_same_spellings():
    """Each spelling of an address is judged as the address: MCP's request check and WEBHOOK_URL's start-up check
    (private receivers allowed, as MCP_ALLOWED_URLS allows them) refuse exactly the link-local and metadata ones,
    and WEBHOOK_URL without the opt-in refuses exactly those and every address that is not public."""
    import ipaddress

    from hypothesis import HealthCheck, given
    from hypothesis import settings as hypothesis_settings

    metadata = {"169.254.169.254", "169.254.170.2", "100.100.100.200"}

    async def mcp_refuses(url: str) -> bool:
        try:
            await checked_addresses(url, "tools[0].server_url")
        except RequestError:
            return True
        return False

    def webhook_refuses(url: str, allow_private: bool) -> bool:
        env = {"WEBHOOK_URL": url, "WEBHOOK_SECRET": SECRET, "WEBHOOK_ALLOW_PRIVATE": str(allow_private)}
        try:
            Settings.from_env(env)
        except ConfigError:
            return True
        return False

    @hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_spellings())
    def agree(spelling: tuple[str, str]) -> None:
        address, host = spelling
        url = f"http://{host}:8080/hooks"
        never = address.startswith("169.254.") or address in metadata
        public = ipaddress.IPv4Address(address).is_global and not ipaddress.IPv4Address(address).is_multicast
        assert asyncio.run(mcp_refuses(url)) is never, host
        assert webhook_refuses(url, allow_private=True) is never, host
        assert webhook_refuses(url, allow_private=False) is (never or not public), host

    agree()
