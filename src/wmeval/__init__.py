"""wmeval: reproducible evaluation of action-conditioned world models."""

__version__ = "0.1.0"
