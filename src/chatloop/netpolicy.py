"""Which addresses the handler may send a request to on someone's word: the one policy of client-supplied MCP
servers (``api.openai.responses.mcp_servers``) and of webhooks (``api.runs.webhooks``, and WEBHOOK_URL's check at
start in ``config``), so the two cannot drift.

- **Never** (whatever an allow-list or setting says): link-local addresses (169.254.0.0/16, fe80::/10) and the cloud
  metadata addresses (``METADATA_ADDRESSES``): the instance's credentials live there.
- **Private** (loopback, RFC 1918, unique-local, shared, unspecified, multicast, reserved: anything not globally
  reachable): only when the caller allows it (MCP_ALLOWED_URLS naming it for MCP, WEBHOOK_ALLOW_PRIVATE for webhooks).

An IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64
``64:ff9b::/96`` and RFC 8215's local-use ``64:ff9b:1::/48``, 6to4, Teredo) is judged by the IPv4 address too. A host name is judged by every address it
resolves to, resolved once: the connection must then go to those addresses only (``chatloop.pinning``), or a name
that answers differently the second time (DNS rebinding) would reach one that was never checked. Numeric spellings
a URL may carry (``2852039166``, ``0251.0376.0251.0376``, ``0xa9.0xfe.0xa9.0xfe``) are not ``ipaddress`` literals,
so they go through the resolver, which reads them as the address they spell, and that address is checked.

Usage::

    refusal("169.254.169.254", allow_private=True)     # 'a link-local or metadata address'
    refusal("10.0.0.7", allow_private=False)           # 'a private or loopback address'
    addresses = await resolved("hooks.example.com")    # every address, once, in the resolver's order
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from urllib.parse import urlsplit

RESOLVE_TIMEOUT_SECONDS = 1.0
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, ...
        "169.254.170.2",  # ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (its classic metadata address; ipaddress counts it global)
    )
)
NEVER = "a link-local or metadata address"
PRIVATE = "a private or loopback address"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
"""RFC 8215's local-use NAT64 prefix: not globally reachable (Python's ``ipaddress`` may count it global), and the
IPv4 address sits where RFC 6052 puts it for the operator's prefix length (/48, /56, /64 or /96): each is judged."""
_RFC6052 = ((6, 8, 9, 11), (7, 8, 9, 12), (9, 13, 13, 13), (12, 16, 16, 16))
"""The bytes of the IPv4 address for a /48, /56, /64 and /96 prefix (byte 8, the "u" octet, is skipped)."""
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def literal(text: str) -> Address | None:
    """``text`` as an IP address (a zone ``%eth0`` dropped), None when it is not one (a name, or a numeric form
    only the resolver reads).

    >>> literal("::ffff:169.254.169.254"), literal("2852039166")
    (IPv6Address('::ffff:a9fe:a9fe'), None)
    """
    try:
        return ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None


def _judged(address: Address) -> list[Address]:
    """``address`` and every IPv4 address it carries."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        carried = [address.ipv4_mapped, address.sixtofour, address.teredo[1] if address.teredo else None]
        if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 0xFFFF):
            carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address in _LOCAL_NAT64:
            packed = address.packed
            carried += [ipaddress.IPv4Address(packed[a:b] + packed[c:d]) for a, b, c, d in _RFC6052]
        found += [a for a in carried if a is not None]
    return found


def never_allowed(text: str) -> bool:
    """Link-local or a cloud metadata address (IPv4 carried in IPv6 too): refused whatever is allowed.

    >>> never_allowed("169.254.169.254"), never_allowed("127.0.0.1"), never_allowed("::ffff:169.254.1.1")
    (True, False, True)
    """
    address = literal(text)
    return address is not None and any(a.is_link_local or a in METADATA_ADDRESSES for a in _judged(address))


def refusal(text: str, allow_private: bool) -> str | None:
    """Why ``text`` (an address) may not be sent to, or None when it may (a name is not judged here: resolve it).

    >>> refusal("1.1.1.1", False), refusal("127.0.0.1", True), refusal("fd00:ec2::254", True)
    (None, None, 'a link-local or metadata address')
    """
    address = literal(text)
    if address is None:
        return None
    if never_allowed(text):
        return NEVER
    judged = _judged(address)
    if not allow_private and (
        address in _LOCAL_NAT64 or any(not a.is_global or a.is_multicast for a in judged)
    ):
        return PRIVATE
    return None


async def resolved(host: str, timeout: float = RESOLVE_TIMEOUT_SECONDS) -> tuple[str, ...]:
    """Every address ``host`` has, once each in the resolver's order (itself when it is an address literal;
    nothing when it does not resolve in ``timeout`` seconds)."""
    address = literal(host)
    if address is not None:
        return (str(address),)
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), timeout)
    except (OSError, TimeoutError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


def resolved_now(host: str, timeout: float = RESOLVE_TIMEOUT_SECONDS) -> tuple[str, ...]:
    """``resolved`` for code that is not async (the settings' check at start): the lookup runs in a daemon
    thread so a resolver that hangs delays start by ``timeout`` at most."""
    address = literal(host)
    if address is not None:
        return (str(address),)
    answer: list[tuple[str, ...]] = [()]

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return
        answer[0] = tuple(dict.fromkeys(str(info[4][0]) for info in infos))

    worker = threading.Thread(target=lookup, name="netpolicy-resolve", daemon=True)
    worker.start()
    worker.join(timeout)
    return answer[0]


def first_refusal(host: str, addresses: tuple[str, ...], allow_private: bool) -> str | None:
    """Why ``host`` (as written) or one of its ``addresses`` may not be sent to; None when all may."""
    for address in (host, *addresses):
        reason = refusal(address, allow_private)
        if reason:
            return reason
    return None


async def url_refusal(url: str, allow_private: bool) -> str | None:
    """Why ``url``'s host may not be sent to (resolved now), or None.

    >>> asyncio.run(url_refusal("http://[::ffff:169.254.169.254]/", allow_private=True))
    'a link-local or metadata address'
    """
    host = urlsplit(url).hostname or ""
    return first_refusal(host, await resolved(host), allow_private)
