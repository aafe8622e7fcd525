"""The Celery adapter: the only layer that imports Celery (the task class, the decorator,
signals, eager mode, canvases, the maintenance tasks and the public ``Tracker``)."""
