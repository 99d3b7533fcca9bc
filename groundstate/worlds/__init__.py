"""Worlds and the one attempt path: SQL domain folders, their environments, ThinkingBox, the episode loop, play."""
