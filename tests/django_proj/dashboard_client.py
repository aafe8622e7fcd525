"""Signs Django users in (Django's test client: a real session) and calls the dashboard
mounted in ``djproj/asgi.py`` with their session cookie; prints what each got as JSON.

Run by ``tests/acceptance/test_django_proj.py`` in a process of its own, in this folder.
"""

from __future__ import annotations

import json
import os
import re

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproj.settings")
django.setup()

from django.contrib.auth.models import User  # noqa: E402 (after django.setup())
from django.test import Client  # noqa: E402
from djproj.asgi import application  # noqa: E402
from djproj.celery import app as celery_app  # noqa: E402
from shop.tasks import confirm_order  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from celery_tracked import Tracker  # noqa: E402

for name, staff, superuser in (("ada", True, True), ("bob", True, False), ("eve", False, False)):
    User.objects.create_user(name, password="pw-" + name, is_staff=staff, is_superuser=superuser)
job_id = confirm_order.delay(order_id=999).id  # no worker: it stays pending
answers: dict[str, dict[str, object]] = {}
for name in ("ada", "bob", "eve", "nobody"):
    cookies = {}
    if name != "nobody":
        django_client = Client()
        assert django_client.login(username=name, password="pw-" + name)
        cookies = {"sessionid": django_client.cookies["sessionid"].value}
    with TestClient(application, cookies=cookies) as web:
        page = web.get(f"/admin/jobs/jobs/{job_id}")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        cancel = web.post(
            f"/admin/jobs/jobs/{job_id}/cancel",
            data={"csrf_token": token.group(1) if token else ""},
        )
        answers[name] = {
            "page": page.status_code,
            "shows_name": f"{name} · " in page.text,
            "cancel": cancel.status_code,
        }
tracker = Tracker.for_app(celery_app)
job = tracker.get_job(job_id)
answers["log"] = {
    "actors": [a.actor for a in tracker.actions()],
    "status": job.status.value if job else None,
}
print(json.dumps(answers))
