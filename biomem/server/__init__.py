"""`biomem serve`: one ASGI server over one store — REST under /v1, MCP at /mcp, the web page at /.

    app.py     create_app(mem, settings): FastAPI with the three mounted, body limit; served() for tests
    rest/      the /v1 routes (Mem0-shaped), one module per resource: people (health, sessions, identities),
               memories (with search and ask), households; common.py what they share
    deps.py    the routes' typed dependencies: the engine and its worker threads
    models.py  their pydantic bodies, replies.py their replies (the OpenAPI document at /v1/openapi.json)
    probes.py  a request's body -> fields and a probe (multipart files or base64 JSON, never a path)
    auth.py    API key -> Caller (role, session binding, attempt-limit keys), the loopback rule
    errors.py  every refusal -> {"error": {"type", "title", "message"}} with its HTTP status
    mcp.py     the MCP tools (streamable HTTP), mounted at /mcp when present

The policy stays in the engine: these modules only turn HTTP into engine calls and back.
"""

from __future__ import annotations

from .app import create_app, served

__all__ = ["create_app", "served"]
