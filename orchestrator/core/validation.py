"""One wording for pydantic validation errors, wherever they reach a person or a model."""

from __future__ import annotations

from pydantic import ValidationError


def describe(exc: ValidationError, *, root: str = "(root)") -> str:
    """`field.path: message; other: message` — each problem with the field it names."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or root}: {e['msg']}" for e in exc.errors())
