"""Statistics over results records: reliability metrics, difficulty (the Jeffreys posterior, bands, signal), run-to-run
agreement, power."""
