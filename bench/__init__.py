"""``make bench``: one module per measurement (``scenarios``, ``overhead``, ``sandbox``, ``cold_start``, ``fallback``,
``handler``, ``throughput``), each with a ``measure()``; ``report`` writes RESULTS.md and the chart; ``__main__`` runs
them in order.

Importing the package sets up what every measurement needs before ``chatloop`` is imported: ``src/`` on the path, quiet
Powertools, and no provider key or chain from the developer's environment.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "chatloop-bench")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "ChatLoopBench")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")  # the handler's EMF lines would flood the output
for _var in ("GROQ_API_KEY", "OPENAI_API_KEY", "MODEL_CHAIN", "PROVIDER_KEYS_SECRET_ARN"):
    os.environ.pop(_var, None)
