"""TinyLM: a deliberately small decoder-only language model."""
from .model import TinyLM, TinyLMConfig

__all__ = ["TinyLM", "TinyLMConfig"]
