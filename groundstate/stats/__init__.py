"""Statistics over results records: reliability metrics, run-to-run agreement, power."""
