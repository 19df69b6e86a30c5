"""Real image files, built in a few bytes (no Pillow), and their ``data:`` URLs, for the image tests.

Usage::

    png(640, 480)                     # a whole PNG file: signature, IHDR, one IDAT, IEND
    data_url(png(2, 2))               # "data:image/png;base64,iVBORw0KGgo..."
    padded_png(1_000_000)             # a PNG of about 1 MB (an ancillary chunk of random bytes): the store's split
"""

from __future__ import annotations

import base64
import os
import random
import struct
import zlib

from tests.support.tls import serve_tls


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int, extra: bytes = b"") -> bytes:
    """A valid grey PNG of ``width`` x ``height``; ``extra`` goes in a private ancillary chunk (readers skip it)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(min(height, 4)))  # a few rows are enough here
    chunks = _chunk(b"IHDR", header) + (_chunk(b"prVt", extra) if extra else b"")
    return b"\x89PNG\r\n\x1a\n" + chunks + _chunk(b"IDAT", zlib.compress(rows)) + _chunk(b"IEND", b"")


def padded_png(size: int, seed: int = 44) -> bytes:
    """A PNG of about ``size`` bytes (random, so nothing compresses it away; the same for the same ``seed``)."""
    return png(64, 64, random.Random(seed).randbytes(size))  # noqa: S311 - test data, not a secret


def jpeg(width: int, height: int, exif: int = 0) -> bytes:
    """A JPEG's header: SOI, an APP1 segment of ``exif`` bytes (EXIF comes before the frame), then SOF0."""
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"\x00" * exif if exif else b""
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9 + app1 + sof + b"\xff\xd9"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def webp(width: int, height: int) -> bytes:
    """An extended (VP8X) WebP header."""
    body = b"WEBP" + b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    body += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body)) + body


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


class ImageServer:
    """An https server on 127.0.0.1 (a trustme CA: ``ca_file`` trusts it) serving ``files`` by path (with a
    ``content-encoding`` for the paths ``encodings`` names); any other path is a redirect to ``/cat.gif`` (a fetch must
    not follow it). Every request path is recorded.

    Usage::

        with ImageServer({"/cat.gif": gif(3, 2)}) as images:
            images.url("/cat.gif"), images.ca_file, images.paths
    """

    def __init__(self, files: dict[str, bytes], encodings: dict[str, str] | None = None) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        served = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                served.paths.append(self.path)
                body = files.get(self.path)
                if body is None:
                    self.send_response(302)
                    self.send_header("location", "/cat.gif")
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                if self.path in (encodings or {}):  # the body as sent is already encoded (gzip, ...)
                    self.send_header("content-encoding", (encodings or {})[self.path])
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.paths: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.ca_file = serve_tls(self.server)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}{path}"

    def __enter__(self) -> ImageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        os.unlink(self.ca_file)
