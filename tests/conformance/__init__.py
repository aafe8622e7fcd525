"""``make conformance``: Celery's own integration suite, plain and tracked (``run.py``)."""
