"""OpenAI's wire APIs over the same turn: chat completions, models, the Responses API (``responses/``) and the
Conversations API (``conversations/``); ``extension`` is the ``x_chatloop`` both turn APIs add. None borrows from
another: what they share with ``/chat`` lives in ``api.items`` and ``api.turns``."""
