"""A moto server on 127.0.0.1 that handles one request at a time, for tests whose app processes share a DynamoDB.

DynamoDB applies each request to an item atomically (a condition and its update one step). moto's backend is not
thread-safe (tests/test_store.py's ``one_request_at_a_time`` does the same in-process): a threaded server lets two
requests pass a condition only one would pass in DynamoDB, or fails one with a 500 ("dictionary changed size during
iteration") when two copies write at once, which a busy machine makes likely. Neither is DynamoDB's behaviour, and
no test may depend on them.

Usage::

    server = AtomicMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
"""

from __future__ import annotations

import threading
from typing import Any

from moto.server import ThreadedMotoServer


class AtomicMotoServer(ThreadedMotoServer):
    """``ThreadedMotoServer`` with one lock around every request."""

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        lock = threading.Lock()

        def one_at_a_time(environ: Any, start_response: Any) -> Any:
            with lock:
                return list(app(environ, start_response))

        self._server = make_server(
            self._ip_address, self._port, one_at_a_time, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()
