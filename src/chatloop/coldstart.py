"""What the Lambda entry point sets before anything else is imported, for the cold start's sake (``import app``
imports this first).

- ``PYDANTIC_DISABLE_PLUGINS``: pydantic looks for plugins in the entry points of every installed distribution
  (``importlib.metadata`` reads the metadata of each of the ~50 packages in the layer) when it builds its first
  validator, on the first request: ~40 ms of CPU, ~0.14 s at 512 MB's third of a core. The artefacts ship no
  pydantic plugin; an operator who adds one sets the variable (to the plugins to leave out, or empty) in the
  function's environment, which this leaves as it is.
- ``httpx._main`` (httpx's command-line client, which the SDKs' ``import httpx`` tries) marked absent: it imports
  ``click`` (in the layer for uvicorn) and then fails on ``pygments``, which is not, so httpx falls back to its stub
  ``main`` after ~11 ms of CPU (~40 ms at 512 MB) spent loading a CLI nothing here runs. Marking a module absent in
  ``sys.modules`` is Python's own way to make its import fail; nothing else of httpx changes.
- ``codecache.install()``: the code ``dataclasses`` and ``typing`` generate from source text as modules load (~1,500
  small compiles, ~75 ms of CPU, ~0.26 s at 512 MB) comes precompiled from the built function
  (``chatloop/codecache.py``); first, so every module imported after it finds its code there.

Usage::

    from chatloop import coldstart  # noqa: F401  (first, in app.py)
"""

from __future__ import annotations

import os
import sys

from chatloop import codecache

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "absent", to import
codecache.install()
