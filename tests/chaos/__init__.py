"""The chaos tier: ``make chaos`` (``python -m tests.chaos.soak``), a bounded soak under
faults; a script, not collected by pytest. See tests/CHAOS.md."""
