"""``/chat``, this server's own API: its renderer and endpoint, and ``/chat`` in a stored conversation (stop, follow)."""
