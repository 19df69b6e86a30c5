"""``/v1/conversations``: OpenAI's Conversations API over the conversation store, and its items."""
