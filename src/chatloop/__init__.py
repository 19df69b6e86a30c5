"""chatloop: a serverless chat handler that runs a bounded, logged LLM tool loop."""

__version__ = "0.1.0"
