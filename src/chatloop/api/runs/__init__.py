"""Turns that outlive their request, kept in the store: one running turn (``turn``: a ``/chat`` thread's and a stored
response's alike) that journals (``journal``, one API for both journals), is followed from any copy (``follow``),
stopped (``running``, ``record``) and ended, and webhooks. The wire APIs build on it: ``/chat`` threads and the
Responses API's stored and background responses."""
