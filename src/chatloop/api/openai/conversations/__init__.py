"""OpenAI's Conversations API (``/v1/conversations``): its endpoints over the conversation store, and its items."""
