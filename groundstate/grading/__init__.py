"""Grading: golden replay and change-set comparison (grader), the LLM judge of reply rubrics, blame."""
