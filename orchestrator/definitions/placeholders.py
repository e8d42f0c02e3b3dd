"""The `{name}` placeholders of a prompt, read as the engine's renderer reads them.

A prompt is filled with `string.Formatter` (`engine/views.py`, `render_prompt`): `{name}` is a
placeholder, `{{` and `}}` are literal braces, and braces that are not a name (a JSON example,
`{"a": 1}`) are left as written. A prompt the formatter cannot read as a whole (a lone `}`, `{}`,
`{0}`, `{name.attr}`, a format spec a text value refuses) is sent as written, so none of its
placeholders is filled. The loader checks each prompt's placeholders against the names that can
fill them, and says when braces keep every placeholder from being filled.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

__all__ = ["Placeholders", "line_of_placeholder", "read_placeholders"]

_NAMED = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)(?:![rsa])?(?::[^{}]*)?\}")


@dataclass(frozen=True)
class Placeholders:
    names: tuple[str, ...]  # the names asked for, in the order they first appear
    unreadable: str | None = None  # why the renderer sends the prompt as written, when it does


class _Filled(dict[str, Any]):
    """Every name has a text value, as when the prompt is rendered (other fields stay as written)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def read_placeholders(template: str) -> Placeholders:
    """The placeholders of `template`, and whether the renderer can fill them at all."""
    names: list[str] = []
    try:
        for _, field, _, _ in string.Formatter().parse(template):
            head = re.split(r"[.\[]", field, maxsplit=1)[0] if field else ""
            if head.isidentifier() and head not in names:
                names.append(head)
        string.Formatter().vformat(template, (), _Filled(dict.fromkeys(names, "text")))
    except (ValueError, IndexError, AttributeError, KeyError, TypeError) as exc:
        # what the formatter stopped at; the names it had not reached yet, found as plain `{name}`
        later = [m.group(1) for m in _NAMED.finditer(template) if m.group(1) not in names]
        return Placeholders(tuple(dict.fromkeys([*names, *later])), _reason(exc))
    return Placeholders(tuple(names))


def line_of_placeholder(source: str, name: str) -> int | None:
    """The first line of a file's text where `{name}` is written (not as `{{name}}`)."""
    pattern = re.compile(r"(?<!\{)\{" + re.escape(name) + r"[}!:.\[]")
    for number, line in enumerate(source.splitlines(), start=1):
        if pattern.search(line):
            return number
    return None


def _reason(exc: Exception) -> str:
    if isinstance(exc, IndexError):
        return "a positional field such as {} or {0}"
    if isinstance(exc, (AttributeError, TypeError, KeyError)):
        return f"a field reaching into a value ({exc})"
    return str(exc)
