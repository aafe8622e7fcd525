"""The services: the job lifecycle (enqueuer, runner, outcome writer, reporter, lease keeper,
relay, reaper, cleanup, successors, retry and cancel), written against the core's ports;
they know nothing of Celery, SQL or Redis (docs/architecture.md)."""
