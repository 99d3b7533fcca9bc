"""Audits of tasks and runs: lint, reward hacks, alternative solutions, certificates, regrade, and a task set's overlap with
the benchmark (fingerprints, near duplicates)."""
