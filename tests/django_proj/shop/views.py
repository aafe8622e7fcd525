"""``POST /orders/``: the job is enqueued only once the order row committed; a rolled-back
order never has one."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from celery_tracked import EnqueueResult

from .models import Order
from .tasks import confirm_order


class Refused(Exception):
    pass


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    item = request.POST.get("item", "")
    enqueued: list[EnqueueResult[Any]] = []
    try:
        with transaction.atomic():
            order = Order.objects.create(item=item)
            # enqueued only if (and once) the transaction commits: never a job for a
            # rolled-back order, never a worker looking for a row not committed yet
            transaction.on_commit(lambda: enqueued.append(confirm_order.enqueue(order.id)))
            if item == "refused":  # something later in the transaction fails
                raise Refused(item)
    except Refused:
        return JsonResponse({"error": "refused"}, status=409)
    # the outermost atomic block has committed: its on_commit callbacks have run
    return JsonResponse({"order_id": order.id, "job_id": enqueued[0].job_id}, status=201)
