"""Public import path of the hook interface (``from celery_tracked.hooks import Hooks``, as
docs/usage.md shows): its home is ``core/hooks.py``."""

from .core.hooks import Delivery, HookChain, Hooks, LogTransitions, NotifyTerminal, Transition, Wait

__all__ = [
    "Delivery",
    "HookChain",
    "Hooks",
    "LogTransitions",
    "NotifyTerminal",
    "Transition",
    "Wait",
]
