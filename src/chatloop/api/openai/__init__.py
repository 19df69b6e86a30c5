"""OpenAI's wire APIs over the same turn: chat completions, models, the Responses API (``responses/``) and the Conversations API (``conversations/``)."""
