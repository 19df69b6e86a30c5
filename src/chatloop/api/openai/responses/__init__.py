"""OpenAI's Responses API (``/v1/responses``): the endpoint and renderer, its request schemas, output items and
stream events (messages, MCP, approvals), stored responses and ``/compact``."""
