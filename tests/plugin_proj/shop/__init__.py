"""A small shop whose tracked tasks are tested with the celery-tracked pytest plugin.

``tests/acceptance/test_testing_plugin.py`` runs this folder's own ``tests/`` (written
only against docs/testing.md) twice in a row, each in a ``python -m pytest`` of its own.
"""
