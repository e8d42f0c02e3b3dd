// Starts Swagger UI on /docs (orchestrator/server/docs.py): an external script, as the page's CSP has no inline script.
"use strict";
window.addEventListener("load", () => {
  window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: false,
    queryConfigEnabled: false, // no ?url= or ?configUrl=: the page shows this server's document only
  });
});
