"""Posts two orders through Django's test client and prints the responses as JSON.

Run by ``tests/acceptance/test_django_proj.py`` in a process of its own, in this folder.
"""

from __future__ import annotations

import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproj.settings")
django.setup()

from django.test import Client  # noqa: E402 (after django.setup())

client = Client()
answers = {}
for item in ("book", "refused"):
    response = client.post("/orders/", {"item": item})
    answers[item] = {"status": response.status_code, "body": response.json()}
print(json.dumps(answers))
