"""groundstate: train and evaluate tool-using LLM agents with rewards read from the final state of a real database."""

__version__ = "0.1.0"
