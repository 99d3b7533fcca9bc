"""Audits of tasks and runs: lint, reward hacks, alternative solutions, certificates, regrade, conformance."""
