"""``GET /``: the chat page, and ``GET /static/...``: its assets, all from the package (no build step, no CDN).

The page is plain HTML, CSS and JavaScript, with marked and DOMPurify vendored under ``page/vendor`` (pinned, their
licences beside them). Every response carries a strict Content-Security-Policy: scripts and styles only from this
app, no inline script, fetches only to this app. Model output is rendered with marked and then sanitised, so HTML a
model writes is inert. Behind API Gateway the page is served under its stage (``/prod/``): a ``<base href>`` makes
every URL in it relative to where it was served, so it calls ``/prod/chat``.

Usage (in the app)::

    Route("/", page, methods=["GET"]), Route("/static/{path:path}", asset, methods=["GET"])
"""

from __future__ import annotations

import html
import re
from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.adapter import gateway_context
from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError

PAGE_DIR = Path(__file__).with_name("static")
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "images.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "vendor/marked.umd.js": "text/javascript; charset=utf-8",
    "vendor/purify.min.js": "text/javascript; charset=utf-8",
}
"""Everything ``/static/`` serves: a fixed list, so no request can name any other file."""
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'self'; form-action 'none'; frame-ancestors 'none'"
)
SAFE_SEGMENT = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9_.~-]{0,99}")
"""One segment of a ``<base href>`` path: unreserved characters only, not ``.`` or ``..``, at most 100 long."""
MAX_BASE_SEGMENTS = 8


def _headers(cache_control: str) -> dict[str, str]:
    return {
        "content-security-policy": CONTENT_SECURITY_POLICY,
        "referrer-policy": "no-referrer",
        "cache-control": cache_control,
    }


@cache
def _read(name: str) -> bytes:
    return (PAGE_DIR / name).read_bytes()


def safe_base(path: object) -> bool:
    """Whether ``path`` may go into ``<base href>``: ``/`` or ``/seg/seg/`` of safe segments, nothing else (no
    protocol-relative ``//host/``, no ``..``, no control character or trailing newline, no query).

    >>> [safe_base(p) for p in ("/prod/", "/prod", "//evil.example/", "/prod/\\n", "/a/../", "/")]
    [True, True, False, False, False, True]
    """
    if not isinstance(path, str) or not path.startswith("/"):
        return False
    segments = path[1:].removesuffix("/").split("/") if path != "/" else []
    return len(segments) <= MAX_BASE_SEGMENTS and all(SAFE_SEGMENT.fullmatch(s) for s in segments)


def base_path(request: Request) -> str:
    """Where the client sees the page, ending in ``/``: API Gateway's stage path (``/prod/``), else the request's
    own path when it is safe, else ``/``."""
    stage_path = gateway_context(request).get("path")
    path = stage_path if isinstance(stage_path, str) and safe_base(stage_path) else request.url.path
    if not safe_base(path):
        path = "/"
    return path if path.endswith("/") else f"{path}/"


def image_limits(request: Request) -> dict[str, str]:
    """What the page's composer checks an image against before it is sent, as ``/chat`` checks it (the types it
    takes, how many go with one message, how large each may be, decoded, and the body their ``data:`` URLs fill):
    the server's own settings, so a refusal is said on the page before megabytes are uploaded.

    The page carries them on its file input: ``accept="image/png,..." data-max-images="5" data-max-bytes="3000000"
    data-max-body="6000000"``.
    """
    settings = RequestContext.of(request).runtime.settings
    return {
        "IMAGE_TYPES": ",".join(settings.image_types()),
        "MAX_IMAGES": str(settings.image_max_count),
        "MAX_IMAGE_BYTES": str(settings.image_max_bytes),
        "MAX_BODY_BYTES": str(settings.max_body_bytes),
    }


async def page(request: Request) -> Response:
    text = _read("index.html").decode().replace("{{BASE}}", html.escape(base_path(request), quote=True))
    for name, value in image_limits(request).items():
        text = text.replace(f"{{{{{name}}}}}", html.escape(value, quote=True))
    return Response(text, media_type="text/html; charset=utf-8", headers=_headers("no-cache"))


async def asset(request: Request) -> Response:
    name = request.path_params["path"]
    if name not in ASSETS:
        raise RequestError(404, "not_found", f"no such path: {request.url.path}")
    return Response(_read(name), media_type=ASSETS[name], headers=_headers("public, max-age=300"))
