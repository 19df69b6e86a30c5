"""The chat page (``GET /``, ``/static/...``): its endpoints and assets (``static/``), served from the package."""
