"""``GET /`` and ``/static/...``: the chat page and its assets (``static/``), served from the package."""
