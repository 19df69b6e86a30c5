"""OpenAI's Responses API (``/v1/responses``): the route (``endpoint``), a request read and checked as its turn
(``turn``) and run (``run``), its output rendered (``render``, over ``api.items.output``), its schemas and objects,
client MCP servers, stored responses (``stored``; journaled while streamed: ``journaled``), background responses
(``background``, run by ``worker``) and ``/compact``."""
