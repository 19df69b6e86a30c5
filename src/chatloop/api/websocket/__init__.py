"""WebSocket mode of the Responses API (``/v1/responses``): the transport-neutral session and its two transports
(the local Starlette route; on Lambda, an API Gateway WebSocket API answered with ``PostToConnection``)."""
