"""What an attachment's MIME type may be: `type/subtype` with optional parameters, nothing else.

An attachment's type comes from a tool, that is, often from model output, and ends up in a
`Content-Type` header when the file is downloaded: CR/LF in it made the download route fail with
no response (and could have added headers). The grammar is RFC 6838's restricted names for type
and subtype (section 4.2), and RFC 9110's parameters (`; name=token` or a quoted string); no
control characters, no spaces inside names, at most 255 characters.
"""

from __future__ import annotations

import re

__all__ = ["MAX_MIME_CHARS", "mime_problem"]

MAX_MIME_CHARS = 255

_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&\-^_.+]{0,126}"  # RFC 6838 restricted-name
_TOKEN = r"[!#$%&'*+\-.^_`|~A-Za-z0-9]+"  # RFC 9110 token
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t -~])*"'  # RFC 9110 quoted-string, printable ASCII only
_MIME = re.compile(rf"{_NAME}/{_NAME}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*")


def mime_problem(value: str) -> str | None:
    """Why `value` is not a MIME type an attachment may carry, or None when it is one."""
    if len(value) <= MAX_MIME_CHARS and _MIME.fullmatch(value):
        return None
    shown = repr(value[:60]) + ("..." if len(value) > 60 else "")
    return (
        f"mime_type {shown} is not a media type: expected type/subtype (RFC 6838, e.g. image/png),"
        f" optionally with '; name=value' parameters, without control characters, at most {MAX_MIME_CHARS} characters"
    )
