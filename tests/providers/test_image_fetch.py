"""IMAGE_FETCH (providers/image_fetch.py): an image by URL fetched for a model that takes only bytes, by the webhooks'
address policy, from a real https server on 127.0.0.1 (tests/support/images.py ``ImageServer``): the bytes as a
``data:`` URL; a loopback address refused unless allowed, a link-local one always, http, a redirect, a file too
large or not an image each refused by name, nothing fetched twice within a minute."""

from __future__ import annotations

import gzip
import tracemalloc
from collections.abc import Iterator

import pytest

from chatloop.deadline import Deadline
from chatloop.providers.failures import ImageUnreadable
from chatloop.providers.image_fetch import ImageFetch
from tests.support.images import ImageServer, data_url, gif, png

CAT = gif(3, 2)
BOMB = gzip.compress(png(8, 8, b"\x00" * 30_000_000), 6)  # ~30 KB on the wire, 30 MB inflated
FILES = {
    "/cat.gif": CAT,
    "/big.png": png(8, 8, b"x" * 5000),
    "/page.html": b"<html>hello</html>",
    "/bomb.png": BOMB,
}
TYPES = ("image/png", "image/gif")


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    with ImageServer(FILES, {"/bomb.png": "gzip"}) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "SSL_CERT_FILE", server.ca_file
        )  # the fetch's TLS trusts the test CA, as a system store would
        yield server


async def test_an_image_is_fetched_once_as_a_data_url(images):
    fetch = ImageFetch(4000, TYPES, allow_private=True)
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "?"},
                {"type": "image_url", "image_url": {"url": images.url("/cat.gif"), "detail": "low"}},
            ],
        },
    ]
    inlined = await fetch.inline(messages, Deadline.after(10))
    assert inlined[0] is messages[0]
    assert inlined[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": data_url(CAT, "image/gif"), "detail": "low"},
    }
    await fetch.inline(messages, Deadline.after(10))
    assert images.paths.count("/cat.gif") == 1  # the tool loop's next call reuses it


@pytest.mark.parametrize(
    ("path", "allow_private", "problem"),
    [
        ("/cat.gif", False, "private or loopback"),
        ("/big.png", True, "larger than 4000 bytes"),
        ("/page.html", True, "is not an image of image/png, image/gif"),
        ("/moved", True, "answered 302"),  # never followed
    ],
)
async def test_a_fetch_is_refused_by_name(images, path, allow_private, problem):
    fetch = ImageFetch(4000, TYPES, allow_private=allow_private)
    with pytest.raises(ImageUnreadable, match=problem):
        await fetch.data_url(images.url(path), Deadline.after(10))


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://169.254.169.254/latest/meta-data/cat.png", "link-local or metadata"),
        ("https://192.0.0.192/latest/cat.png", "link-local or metadata"),  # Oracle Cloud's metadata
        # RFC 8215's local-use NAT64 prefix carrying 169.254.169.254 (RFC 6052's /96 and /64 layouts)
        ("https://[64:ff9b:1::a9fe:a9fe]/cat.png", "link-local or metadata"),
        ("https://[64:ff9b:1:0:a9:fea9:fe00:0]/cat.png", "link-local or metadata"),
        ("http://127.0.0.1/cat.png", "not https"),
    ],
)
async def test_what_the_policy_never_reaches_is_not_fetched(url, problem):
    with pytest.raises(ImageUnreadable, match=problem):
        await ImageFetch(4000, TYPES, allow_private=True).data_url(url, Deadline.after(10))


async def test_a_compressed_bomb_is_refused_without_being_inflated(images):
    """A server answering with a gzip body (whatever was asked) that inflates to 30 MB: it is inflated a piece at a
    time (httpx2 decodes at most 1 MiB a step) and refused past IMAGE_MAX_BYTES, never inflated whole."""
    fetch = ImageFetch(4000, TYPES, allow_private=True)
    tracemalloc.start()
    try:
        with pytest.raises(ImageUnreadable, match="larger than 4000 bytes"):
            await fetch.data_url(images.url("/bomb.png"), Deadline.after(10))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, peak  # ~2.3 MB measured (a decode step and the TLS buffers); whole: 30 MB
