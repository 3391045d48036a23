"""textkit: small, dependable text utilities (the orchardist quickstart project)."""

from .words import word_count, words

__version__ = "0.1.0"

__all__ = ["__version__", "word_count", "words"]
