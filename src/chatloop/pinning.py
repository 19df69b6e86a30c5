"""Connections to a host that was checked go to the addresses that were checked, and nowhere else: client-supplied
MCP servers (``tools.mcp.client``) and webhooks (``api.runs.webhooks``).

The host is resolved once and every address it has is checked (``chatloop.netpolicy``). If the connection resolved
the name again, a name that answers differently the second time (DNS rebinding) would reach an address that was never
checked: a cloud metadata endpoint, say. So the HTTP client never resolves anything: its network backend connects to
the checked addresses (tried in order) for the checked host, whatever port a request of the connection names (an
in-origin redirect from http to https keeps the host), and refuses any other host. TLS keeps the original host for
SNI and certificate checks, and the ``Host`` header is the URL's own, since only the socket's peer changes.

Usage::

    transport = pinned_transport("mcp.example.com", ("203.0.113.7",))
    async with httpx2.AsyncClient(transport=transport) as http: ...   # never resolves mcp.example.com again
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

    import httpx2
    from httpcore2 import AsyncNetworkStream
    from httpcore2._types import SOCKET_OPTION


def pinned_transport(
    host: str, addresses: Sequence[str], ssl_context: ssl.SSLContext | None = None
) -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport whose every connection goes to one of ``addresses`` for ``host`` (refused for any
    other host, and for ``host`` when ``addresses`` is empty: it did not resolve when it was checked).
    ``ssl_context``: one a caller keeps (loading the trust store takes ~20-50 ms); None: a new default one.

    Given to an ``AsyncClient`` explicitly, it also keeps proxies from the environment out of the way (a client
    with its own transport reads none), so nothing else decides where the bytes go."""
    import httpcore2
    import httpx2
    from httpcore2 import AsyncNetworkBackend
    from httpcore2._backends.auto import AutoBackend

    class PinnedBackend(AsyncNetworkBackend):
        def __init__(self) -> None:
            self._inner = AutoBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[SOCKET_OPTION] | None = None,
        ) -> AsyncNetworkStream:
            if host.lower().strip("[]") != pinned_host:
                raise httpcore2.ConnectError(f"{host!r} is not the checked host; the connection was not made")
            if not addresses:
                raise httpcore2.ConnectError("the host did not resolve when the request was checked")
            failure: Exception = httpcore2.ConnectError("no address answered")
            for address in addresses:  # each one was checked; the first that answers is used
                try:
                    return await self._inner.connect_tcp(
                        address,
                        port,
                        timeout=timeout,
                        local_address=local_address,
                        socket_options=socket_options,
                    )
                except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                    failure = exc
            raise failure

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    # TLS needs nothing of its own: httpcore2 starts TLS on the stream this backend returns with
    # ``server_hostname=self._origin.host`` (httpcore2/_async/connection.py, ``_connect``), the URL's host, so SNI
    # and the certificate check name the checked host, never the address (tests/tools/test_mcp_pinning.py checks both).
    pinned_host = host.lower().strip("[]")
    # One SSL context for both: the transport's own pool is replaced anyway.
    context = ssl_context or httpx2.create_ssl_context()
    transport = httpx2.AsyncHTTPTransport(verify=context)
    # httpx2's transport takes no network backend of its own: its connection pool is replaced by one that has the
    # pinned backend, built as the transport builds its own (tests/tools/test_mcp_pinning.py fails if this stops working).
    transport._pool = httpcore2.AsyncConnectionPool(ssl_context=context, network_backend=PinnedBackend())
    return transport
