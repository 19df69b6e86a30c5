"""The chat page: first contentful paint in Debian's Chromium from the app under uvicorn on loopback (median ms,
a fresh browser context each load, as a first visit), and the page's weight (every file it loads)."""

from __future__ import annotations

import shutil

from bench.common import median


def measure(reps: int) -> dict:
    from tests.support.server import Server

    from chatloop.api import create_app
    from chatloop.api.page.endpoints import ASSETS, PAGE_DIR
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings

    weight = sum((PAGE_DIR / name).stat().st_size for name in ["index.html", *ASSETS])
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {"weight_bytes": weight, "first_paint_ms": None}
    from playwright.sync_api import sync_playwright

    settings = Settings()
    runtime = Runtime(settings, keys_loader=lambda s: {})
    paints = []
    with Server(create_app(settings, runtime=runtime)) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for _ in range(reps + 1):
            context = browser.new_context()
            page = context.new_page()
            page.goto(server.root + "/")
            page.wait_for_load_state("load")
            paints.append(
                page.evaluate(
                    "() => new Promise((done) => new PerformanceObserver((list) => done(list.getEntries()[0].startTime))"
                    ".observe({type: 'paint', buffered: true}))"
                )
            )
            context.close()
        browser.close()
    return {"weight_bytes": weight, "first_paint_ms": median(paints[1:])}  # the first load warms the server
