"""Webhooks (issue #41): what checking WEBHOOK_URL's address costs every send (``chatloop.netpolicy``: the host
resolved once, every address judged; target ≤ 1 ms median), and one whole delivery to a local receiver (check,
pinned connection, signed POST) for scale."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.common import median
from chatloop import netpolicy
from chatloop.api.runs import webhooks
from chatloop.config import Settings

TARGET_MS = 1.0


async def _checks(url: str, reps: int) -> list[float]:
    """Each check's ms: what ``webhooks.notify`` does before it connects."""
    host = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        addresses = await netpolicy.resolved(host)
        netpolicy.first_refusal(host, addresses, allow_private=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


class _Ok(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


def measure(reps: int) -> dict[str, Any]:
    checks = reps * 50  # a check takes microseconds: many per repetition for a steady median
    literal = asyncio.run(_checks("http://127.0.0.1:8080/hooks", checks))
    named = asyncio.run(_checks("http://localhost:8080/hooks", checks))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = Settings(
        webhook_url=f"http://127.0.0.1:{server.server_address[1]}/hooks",
        webhook_secret="whsec_" + base64.b64encode(os.urandom(32)).decode(),
        webhook_allow_private=True,
    )

    async def deliveries() -> list[float]:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            await webhooks.notify(settings, "resp_bench", "completed")
            times.append((time.perf_counter() - start) * 1000)
        return times

    try:
        delivered = asyncio.run(deliveries())
    finally:
        server.shutdown()
        server.server_close()
    return {
        "check_literal_ms": median(literal),
        "check_name_ms": median(named),
        "delivery_ms": median(delivered),
        "checks": checks,
        "reps": reps,
    }


def section(w: dict[str, Any]) -> list[str]:
    worst = max(w["check_literal_ms"], w["check_name_ms"])
    return [
        "## Webhooks: the address check",
        "",
        f"WEBHOOK_URL's host checked at every send (resolved once, each address judged by `chatloop.netpolicy`), "
        f"medians over {w['checks']}; a whole delivery to a local receiver over {w['reps']}:",
        "",
        "| what | ms |",
        "|---|---|",
        f"| the check, an address literal (`127.0.0.1`) | {w['check_literal_ms']:.3f} |",
        f"| the check, a name (`localhost`, the system resolver; a DNS server adds its round trip) | "
        f"{w['check_name_ms']:.3f} |",
        f"| one delivery: check, pinned connection, signed POST, 200 | {w['delivery_ms']:.1f} |",
        "",
        f"Target ≤ {TARGET_MS:g} ms median for the check: {'met' if worst <= TARGET_MS else 'MISSED'}.",
        "",
    ]
