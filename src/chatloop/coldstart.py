"""What the Lambda entry point sets before anything else is imported, for the cold start's sake (``import app``
imports this first).

- ``codecache.install()``: what ``dataclasses``, ``typing`` and ``re`` compile as modules load (~1,800 texts and
  patterns, ~90 ms of CPU, ~0.3 s at 512 MB) comes precompiled from the built function (``chatloop/codecache.py``);
  first, so every module imported after it finds its code there.
- ``PYDANTIC_DISABLE_PLUGINS``: pydantic looks for plugins in the entry points of every installed distribution
  (``importlib.metadata`` reads the metadata of each of the ~50 packages in the layer) when it builds its first
  validator, on the first request: ~40 ms of CPU, ~0.14 s at 512 MB's third of a core. The artefacts ship no
  pydantic plugin; an operator who adds one sets the variable (to the plugins to leave out, or empty) in the
  function's environment, which this leaves as it is.
- ``httpx._main`` (httpx's command-line client, which the SDKs' ``import httpx`` tries) marked absent: it imports
  ``click`` (in the layer for uvicorn) and then fails on ``pygments``, which is not, so httpx falls back to its stub
  ``main`` after ~11 ms of CPU (~40 ms at 512 MB) spent loading a CLI nothing here runs. Marking a module absent in
  ``sys.modules`` is Python's own way to make its import fail; nothing else of httpx changes.
- On Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set), the cyclic garbage collector's passes over what the imports build:
  ``import app`` leaves ~40,000 objects the collector tracks and the first call's SDK import ~16,000 more, nearly all
  kept for the process's life, and the passes the collector makes as they are allocated walk them again and again
  (~50 M instructions, ~9 ms of CPU, ~30 ms at 512 MB). The collector is off while ``app`` imports; ``imported()`` (the end of
  ``app.py``) freezes what the imports built (``gc.freeze``: never walked again) and turns the collector back on
  with a first generation of ``FIRST_TURN_THRESHOLD`` allocations until ``settled()`` (the first model call's request
  is on the wire: ``providers.warmup``) restores the usual thresholds. Garbage is collected all along but during the
  import itself; at worst (no model call ever) the first generation stays larger, never unbounded.

Usage::

    from chatloop import coldstart  # noqa: F401  (first, in app.py)
    coldstart.imported()            # the end of app.py's module body
    coldstart.settled()             # the first model call waits on the network
"""

from __future__ import annotations

import gc
import os
import sys

from chatloop import codecache

codecache.install()  # first: the imports below (config's dataclasses) find their code in it

from chatloop.config import from_environment  # noqa: E402

FIRST_TURN_THRESHOLD = 50_000
"""Generation 0's threshold from the end of ``import app`` to the first model call (Python's default: 700)."""
_THRESHOLDS = gc.get_threshold()
_PHASE = "off"
"""``off`` (not on Lambda, or the collector was off already), ``importing``, ``first turn``, ``settled``."""

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "absent", to import
if from_environment("AWS_LAMBDA_FUNCTION_NAME") and gc.isenabled():
    gc.disable()
    _PHASE = "importing"


def phase() -> str:
    """Where the collector's cold-start schedule is (tests, the bench)."""
    return _PHASE


def imported() -> None:
    """``app`` is imported: what it built is frozen out of the collector's walks, and the collector is back on,
    with a larger first generation until ``settled``. Once; nothing off Lambda."""
    global _PHASE
    if _PHASE != "importing":
        return
    _PHASE = "first turn"
    gc.freeze()
    gc.set_threshold(FIRST_TURN_THRESHOLD, *_THRESHOLDS[1:])
    gc.enable()


def settled() -> None:
    """The first turn's imports are done (its model call waits on the network, or a snapshot is taken): the usual
    thresholds again. Once; nothing off Lambda."""
    global _PHASE
    if _PHASE == "importing":
        imported()
    if _PHASE != "first turn":
        return
    _PHASE = "settled"
    gc.set_threshold(*_THRESHOLDS)
