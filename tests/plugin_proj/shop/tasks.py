"""The shop's tracked tasks (declared without ``app=``: they bind to the current app)."""

from __future__ import annotations

from typing import Any

from celery_tracked import Unrecoverable, tracked_task


@tracked_task(queue="mail", idempotency_key="invoice:{order_id}")
def send_invoice(order_id: str, amount: int, currency: str = "EUR") -> dict[str, Any]:
    return {"order_id": order_id, "total": f"{amount} {currency}"}


@tracked_task(bind=True, max_attempts=3)
def fetch_rate(self: Any, currency: str) -> float:
    """Its first attempt fails (the rates service is flaky): retried, then completed."""
    if self.request.retries == 0:
        raise ConnectionError("rates service unreachable")
    return 1.1


@tracked_task(max_attempts=2)
def charge(card: str) -> None:
    """The card processor is down: every attempt fails."""
    raise ConnectionError(f"cannot charge {card}")


@tracked_task
def refund(order_id: str) -> None:
    raise Unrecoverable(f"order {order_id} was never paid")


@tracked_task(bind=True, idempotency_key="order:{order_id}")
def place_order(self: Any, order_id: str, items: int) -> str:
    """A pipeline's first step: its successors are the invoice and one packing per item."""
    self.then(send_invoice, order_id, amount=10 * items)
    for item in range(items):
        self.then(pack, order_id, item)
    return "placed"


@tracked_task(idempotency_key="pack:{order_id}:{item}")
def pack(order_id: str, item: int) -> str:
    return f"{order_id}/{item} packed"
