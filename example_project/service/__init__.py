"""The service of the brief: a FastAPI app that validates a request, records a tracked
job, answers 202 with its id and lets its owner poll it, with the workers that run it.

- :mod:`.config`: the seed's environment names (``REDIS_URL``, ``DATABASE_URL``,
  ``JOB_QUEUE_*``) mapped onto ``tracked_*`` settings, and the service's own settings;
- :mod:`.celery_app`: the Celery app and its processors (:mod:`.processors`);
- :mod:`.api`: the HTTP API (:mod:`.requests`: one pydantic model per queue);
- :mod:`.storage`: the example's own tables (documents, sent emails, notifications).

See ``example_project/README.md``.
"""
