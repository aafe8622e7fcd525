"""Small helpers for frameworks around Celery (``celery_tracked.contrib.django``)."""
