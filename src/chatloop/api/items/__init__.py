"""The item vocabulary ``/v1/responses``, ``/v1/conversations`` and ``/chat`` in a conversation share, owned by none of
them: input items as requests send them and as kept items are read back (``inputs``, with ``approvals``, ``mcp``,
``compaction``); items as the chat messages a turn runs on (``messages``); the output items a turn's events become
(``objects``, ``output``); items as a conversation or a stored response keeps them, read back as a turn's history
(``stored``); and the conversation store from a request (``store``: the caller's store, its 503, the one 404, list
parameters). Below the turn machinery (``api.turns``' approvals and compaction read these items), above ``api.http``.
"""
