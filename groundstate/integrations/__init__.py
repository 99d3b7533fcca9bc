"""Adapters that serve groundstate environments through other projects' protocols (docs/INTEGRATIONS.md).

Each is a thin layer over `groundstate.types.Environment`, imports its framework lazily (behind its own
optional extra) and grades with the same `Environment.grade` as `groundstate run`.
"""
