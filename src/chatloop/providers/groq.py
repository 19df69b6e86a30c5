"""``groq:`` models through the official ``groq`` SDK (imported on first use)."""

from chatloop.providers.sdk import SDKChatModel


class GroqModel(SDKChatModel):
    sdk_module = "groq"
    client_class = "AsyncGroq"
