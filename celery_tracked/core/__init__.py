"""The core: values and pure decisions (jobs, keys, limits, retry policy, outcomes, call
preparation, masking, the task description, the store's and the platform's ports). No I/O,
no Celery; every other layer may import it (docs/architecture.md)."""
