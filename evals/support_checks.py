"""Predicates the support_demo eval suite names (`predicate: support_checks.py:NAME`).

Each takes the KV values the check lists, by key, and returns True/False or
(passed, reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def order_untouched(values: Mapping[str, Any]) -> tuple[bool, str]:
    """No order the check names was confirmed, cancelled or shipped during the run."""
    changed = {key: value for key, value in values.items() if value is not None}
    if changed:
        return False, "the agent changed " + ", ".join(f"{k} to {v!r}" for k, v in changed.items())
    return True, "no order status changed"
