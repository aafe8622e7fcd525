"""A small service that uses celery-tracked the way a real app would."""
