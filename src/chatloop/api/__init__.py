"""The HTTP surface: a Starlette app serving /chat, /v1/chat/completions and /health."""

from chatloop.api.app import create_app

__all__ = ["create_app"]
