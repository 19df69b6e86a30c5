"""``openai:`` models through the official ``openai`` SDK (imported on first use)."""

from chatloop.providers.sdk import SDKChatModel


class OpenAIModel(SDKChatModel):
    sdk_module = "openai"
    client_class = "AsyncOpenAI"
