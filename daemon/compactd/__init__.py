"""compactd: keeps agents' session transcripts inside their context windows, from outside the agents."""

__version__ = "0.1.0"
