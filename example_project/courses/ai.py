"""A fake AI provider with configurable latency, failures and credit exhaustion.

Configured from the environment (read on every call, so a test can set it per worker):

- ``COURSE_AI_LATENCY_MS``: how long each call takes (default 50);
- ``COURSE_AI_FAULTS``: ``step=fault`` pairs separated by commas, where ``step`` is a
  step's idempotency key (``module_exam:c1-m2``) and ``fault`` is ``credits`` (the
  account is out of AI credits: :class:`CreditsExhausted`, an ``Unrecoverable``), ``down``
  (the provider is down: :class:`ProviderDown`, retried until the step's attempts are
  exhausted) or ``hang`` (the call blocks while that fault is configured, at most 60 s);
- ``COURSE_AI_FAULTS_FILE``: more pairs, read from this file on every call (so faults can
  change while workers run).
"""

from __future__ import annotations

import os
import time

from celery_tracked import Unrecoverable


class CreditsExhausted(Unrecoverable):
    """The account has no AI credits left: the course stops, nothing runs after it."""


class ProviderDown(ConnectionError):
    """The AI provider did not answer (retried)."""


def faults() -> dict[str, str]:
    text = os.environ.get("COURSE_AI_FAULTS", "")
    path = os.environ.get("COURSE_AI_FAULTS_FILE")
    if path and os.path.exists(path):
        with open(path) as f:
            text += "," + f.read().replace("\n", ",")
    pairs = (p.partition("=") for p in text.split(","))
    return {step.strip(): fault.strip() for step, _, fault in pairs if step.strip()}


def generate(step: str, prompt: str) -> str:
    """The provider's answer to ``prompt`` for ``step`` (its idempotency key)."""
    time.sleep(int(os.environ.get("COURSE_AI_LATENCY_MS", "50")) / 1000)
    fault = faults().get(step)
    deadline = time.monotonic() + 60
    while fault == "hang" and time.monotonic() < deadline:
        time.sleep(0.05)
        fault = faults().get(step)
    if fault == "credits":
        raise CreditsExhausted(f"no AI credits left for {step}")
    if fault == "down":
        raise ProviderDown(f"AI provider unavailable for {step}")
    return f"[{step}] {prompt}"
