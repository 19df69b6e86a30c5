"""TLS for the tests' local HTTPS servers: a throwaway CA (trustme) and the server's socket wrapped with a
certificate for 127.0.0.1 it issued.

Usage::

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ca_file = serve_tls(server)        # a PEM bundle of the CA, for the client to trust (a temporary file)
"""

from __future__ import annotations

import ssl
import tempfile
from socketserver import TCPServer


def serve_tls(server: TCPServer) -> str:
    """Wrap ``server``'s socket in TLS with a certificate for 127.0.0.1 from a new CA; the CA's PEM file's path."""
    import trustme

    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as bundle:
        bundle.write(ca.cert_pem.bytes())
    return bundle.name
