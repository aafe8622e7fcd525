"""The service's own error: a dependency did not answer."""

from __future__ import annotations

#: What a caller is told when the broker, Redis or the database is down: no host, no cause.
UNAVAILABLE = "the service is temporarily unavailable; try again later"


class Unavailable(Exception):
    """A service the API depends on did not answer (answered as 503, without details)."""
