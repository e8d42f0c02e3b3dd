"""`/docs`: the API's Swagger UI, off unless asked for (`create_app(docs=True)`, `orchestrator serve --docs`).

FastAPI's own `/docs` and `/redoc` pages load their scripts from a CDN at a floating version
(`swagger-ui-dist@5`) without integrity, with an inline script, and no CSP, on the origin where the
watch page keeps its token in `localStorage`: whatever that CDN served could read the token. They
are switched off. This page loads one pinned Swagger UI release whose files are checked by
Subresource Integrity (the hashes of the npm package's files, which the CDN serves unchanged), starts
it from `static/docs.js` (no inline script), and is served under the page's CSP widened by that one
release's path only (`guard.DOCS_CSP`). `/openapi.json` stays: it is the API's public shape, and
clients build from it.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["DOCS_PATH", "SWAGGER_UI", "router"]

DOCS_PATH = "/docs"
SWAGGER_UI = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.35.0/"
"""The pinned release; a new one needs its files' SRI hashes below (`openssl dgst -sha384 -binary f | base64`)."""
_SCRIPT = ("swagger-ui-bundle.js", "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9")
_STYLE = ("swagger-ui.css", "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I")

PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>orchestrator API</title>
<link rel="stylesheet" href="{SWAGGER_UI}{_STYLE[0]}" integrity="{_STYLE[1]}" crossorigin="anonymous">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{SWAGGER_UI}{_SCRIPT[0]}" integrity="{_SCRIPT[1]}" crossorigin="anonymous"></script>
<script src="/static/docs.js"></script>
</body>
</html>
"""

router = APIRouter()


@router.get(DOCS_PATH, include_in_schema=False)
async def docs() -> HTMLResponse:
    return HTMLResponse(PAGE)
