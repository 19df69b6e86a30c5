"""Items: what ``/v1/responses``, ``/v1/conversations`` and ``/chat`` in a conversation share, owned by none of them.

- ``inputs`` (with ``approvals``, ``mcp``, ``compaction``): input items as requests send them and as kept items are
  read back; ``messages``: items as the chat messages a turn runs on;
- ``objects`` and ``output``: the output items a turn's events become (and their Responses API event frames);
- ``stored``: items as a conversation or a stored response keeps them, and read back as a turn's history;
  ``store``: the conversation store from a request (the caller's store, its 503, the one 404, list parameters).

Below the turn machinery (``api.turns``: approvals and compaction read these items) and above ``api.http``.
"""
