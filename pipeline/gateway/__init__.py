"""The gateway: the OpenAI Responses API over HTTP, SSE and WebSocket, with DeltaGuard's
safety stage in the request path (docs/contract.md section 4)."""
