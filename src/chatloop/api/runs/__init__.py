"""Turns that outlive their request, kept in the store: run records (``record``), the journal a running turn writes
and any copy follows (``journal``, ``follow``), stop and cancel (``running``), and webhooks. The wire APIs build on
it: ``/chat`` threads and the Responses API's stored and background responses."""
