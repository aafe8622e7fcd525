"""The shop's own Celery app, its tracked tasks declared on it (``app=app``)."""

from __future__ import annotations

from typing import Any

from celery import Celery

from celery_tracked import tracked_task

app = Celery("myshop", broker="memory://", set_as_current=False)


@tracked_task(app=app, queue="mail", idempotency_key="invoice:{order_id}")
def send_invoice(order_id: str, amount: int) -> dict[str, Any]:
    return {"order_id": order_id, "total": amount}
