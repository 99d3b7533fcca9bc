"""The method's jobs: runs of many attempts, selection, export, report, the quickstart, domain scaffolding."""
