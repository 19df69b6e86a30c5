"""OpenAI's Conversations API (``/v1/conversations``): its endpoints over the conversation store, and their request
bodies (the items it keeps are ``api.items``')."""
