"""A tracked task that reads and writes the Django database from the worker."""

from __future__ import annotations

from celery_tracked import Unrecoverable, tracked_task

from .models import Order


@tracked_task(queue="djproj", idempotency_key="confirm:{order_id}", max_attempts=3)
def confirm_order(order_id: int) -> dict[str, object]:
    updated = Order.objects.filter(id=order_id).update(status="confirmed")
    if not updated:
        raise Unrecoverable(f"order {order_id} does not exist")
    return {"order_id": order_id, "status": "confirmed"}
