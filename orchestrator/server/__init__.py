"""The HTTP + WebSocket server and the watch page (`orchestrator serve`).

Import `create_app` from `orchestrator.server.app`; this package stays empty so
that importing it does not pull in FastAPI.
"""
