"""Turns that outlive their request, kept in the store: run records, the journal a running turn writes and any copy follows, stop and cancel, background responses and their webhooks."""
