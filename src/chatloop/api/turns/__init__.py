"""The turn machinery every endpoint shares once its request is read: the checks before any model call (``checks``),
the request schemas, the one ``TurnRequest`` builder (``build``), the one path a turn is served through (``serve``),
budgets, approvals, compaction, and the key sealing the state handed to clients (``statekey``). It imports no wire
API and nothing of ``runs``: what it needs of either is passed in, or lives in ``api.items``."""
