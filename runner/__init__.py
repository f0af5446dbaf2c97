"""deltarun: evidence-grade evaluation of coding agents in sealed Docker sandboxes."""

__version__ = "0.1.0"
