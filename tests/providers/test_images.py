"""Images as the providers count and read them (providers/images.py), table-tested: an image's size from its header
(PNG, JPEG after EXIF, GIF, WebP), OpenAI's and Anthropic's documented token counts, what a conversation's estimate
adds for an image, the checks of a ``data:`` URL, and which members of a chain can see a turn's images."""

from __future__ import annotations

import pytest

from chatloop.providers.catalog import Catalog
from chatloop.providers.chain import blind
from chatloop.providers.images import (
    UNKNOWN_SIZE_TOKENS,
    ImageError,
    Images,
    anthropic_image_tokens,
    carried_images,
    image_size,
    image_tokens,
    openai_image_tokens,
    read_data_url,
)
from chatloop.providers.tokens import message_tokens
from tests.support.images import data_url, gif, jpeg, png, webp


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(640, 480), (640, 480)),
        (jpeg(1920, 1080), (1920, 1080)),
        (jpeg(800, 600, exif=30_000), (800, 600)),  # the frame header after a long EXIF segment
        (gif(32, 16), (32, 16)),
        (webp(4000, 3000), (4000, 3000)),
        (b"not an image at all", None),
        (b"\x89PNG\r\n\x1a\n", None),  # a signature and nothing after it
        (b"\xff\xd8\xff", None),
    ],
)
def test_the_size_is_read_from_the_header(data, size):
    assert image_size(data) == size


@pytest.mark.parametrize(
    ("width", "height", "detail", "tokens"),
    [  # OpenAI's own examples (platform.openai.com/docs/guides/images-vision, "Calculating costs")
        (1024, 1024, "high", 765),
        (2048, 4096, "high", 1105),
        (4096, 8192, "low", 85),
        (512, 512, "auto", 255),
        (100, 100, "high", 255),  # one tile however small
        (768, 2048, "high", 1445),  # the most any image costs
    ],
)
def test_openai_counts_tiles(width, height, detail, tokens):
    assert openai_image_tokens(width, height, detail) == tokens


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (200, 200, 54),
        (1000, 1000, 1334),
        (1092, 1092, 1590),
        (3136, 3136, 3279),
    ],  # the long edge scaled to 1568
)
def test_anthropic_counts_pixels(width, height, tokens):
    assert anthropic_image_tokens(width, height) == tokens


@pytest.mark.parametrize(
    ("url", "detail", "tokens"),
    [
        (data_url(png(1024, 1024)), "high", 1399),  # Claude's count is the larger: 1024 x 1024 / 750
        (data_url(png(512, 512)), "auto", 350),
        (data_url(png(4000, 4000)), "low", 85),
        (data_url(jpeg(300, 200, exif=9000), "image/jpeg"), "auto", 255),
        ("https://example.com/cat.png", "auto", UNKNOWN_SIZE_TOKENS),  # never fetched: the worst case
        ("https://example.com/cat.png", "low", 85),
        ("data:image/png;base64,!!!!", "high", UNKNOWN_SIZE_TOKENS),
    ],
)
def test_an_image_costs_what_the_providers_count(url, detail, tokens):
    assert image_tokens(url, detail) == tokens


def test_the_estimate_counts_the_image_not_its_base64():
    text = {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}]}
    url = data_url(png(1024, 1024, b"\x00" * 200_000))  # 270 KB of base64 that the model never reads as text
    with_image = {
        "role": "user",
        "content": [*text["content"], {"type": "image_url", "image_url": {"url": url, "detail": "high"}}],
    }
    assert message_tokens(with_image) - message_tokens(text) == pytest.approx(1399)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("data:image/png;base64,iVBORw0KGgo=", None),
        ("data:image/svg+xml;base64,PHN2Zz4=", "not taken"),
        ("data:image/png,rawtext", "must be data:image/<type>;base64"),
        ("data:image/png;base64,@@@@", "not valid base64"),
        (data_url(gif(1, 1), "image/gif"), None),
        (data_url(gif(1, 1), "image/png"), "is not a image/png image (it is image/gif)"),
        (data_url(png(1, 1, b"x" * 5000)), "larger than 4000 bytes"),
    ],
)
def test_a_data_url_is_checked(url, problem):
    if problem is None:
        assert read_data_url(url, 4000).data.startswith((b"\x89PNG", b"GIF"))
        return
    with pytest.raises(ImageError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        read_data_url(url, 4000)


@pytest.mark.parametrize(
    ("model", "images", "reason"),
    [
        ("groq:llama-3.3-70b-versatile", Images(1, 0), "no vision support"),
        ("groq:meta-llama/llama-4-scout-17b-16e-instruct", Images(1, 1), None),
        ("openai:gpt-4.1-mini", Images(2, 2), None),
        ("bedrock:amazon.nova-pro-v1:0", Images(1, 0), None),
        ("bedrock:amazon.nova-pro-v1:0", Images(2, 1), "cannot read an image by URL"),
        ("bedrock:amazon.nova-micro-v1:0", Images(1, 0), "no vision support"),
        ("local:qwen2.5-vl", Images(1, 1), None),  # not in the catalog: tried, not assumed blind
        ("groq:llama-3.3-70b-versatile", Images(0, 0), None),
    ],
)
def test_who_can_see_a_turns_images(model, images, reason):
    said = blind(Catalog.load().get(model), images)
    assert (said is None) if reason is None else (said is not None and reason in said)


def test_images_are_counted_in_a_conversation():
    url = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    inline = {"type": "image_url", "image_url": {"url": data_url(png(1, 1))}}
    messages = [
        {"role": "user", "content": [url, inline]},
        {"role": "assistant", "content": "two images"},
        {"role": "user", "content": [inline]},
    ]
    assert carried_images(messages) == Images(3, 1)
