"""Hindsight: train and diagnose multi-turn LLM agents in text environments.

Importing the package stays light (no torch, no transformers): heavy backends load
only when a model that needs them is requested.
"""

__version__ = "0.1.0"
