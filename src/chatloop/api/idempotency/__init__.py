"""Retried requests answered once (``Idempotency-Key``): the record store and the route wrapper."""
