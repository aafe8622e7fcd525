"""`make demo`: a scripted story of tracked jobs, with live progress and their histories.

Run with ``python -m example_project.demo``. With no service variables it needs nothing:
SQLite (``.demo/demo.sqlite3``), the in-memory broker, the in-process guard
(``tracked_redis_url = "memory://"``) and an in-process worker thread. With
``DEMO_BROKER_URL``, ``CELERY_TRACKED_DATABASE_URL`` and ``CELERY_TRACKED_REDIS_URL`` all
set, the same story runs against those services and real ``celery worker`` processes.

- :mod:`.config`: the mode, and the Celery app for it (:mod:`.app` makes it);
- :mod:`.tasks`: the story's tracked tasks (the course reuses ``example_project.courses``);
- :mod:`.workers`: the in-process worker, or the worker subprocesses;
- :mod:`.story`: what is enqueued and what each job is expected to end as;
- :mod:`.report`: live progress, the closing table, the histories, the result line.
"""
