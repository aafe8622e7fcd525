"""The request body's size limit, enforced while the body streams in.

:class:`BodyLimit` (an ASGI middleware) answers 413 at once when ``Content-Length`` says
more than the limit, and otherwise counts the bytes as the route reads them: the chunk
that passes the limit is answered 413 by the middleware itself and raises
:class:`BodyTooLarge` in the route reading it (whatever the route or FastAPI's body parsing
then answers is dropped), so a body over the limit is never read whole, chunked or not.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: bytes a request body may have: a document's 100,000 characters, JSON-escaped, fit
MAX_BODY = 1_048_576
TOO_LARGE = "the request body is too large"


class BodyTooLarge(Exception):
    """A request body passed the limit while it was read."""


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes (413), reading at most ``limit`` + one
    chunk of them."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await too_large(send)
            return
        seen, started, refused = 0, False, False

        async def limited() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if not started and not refused:
                        refused = True
                        await too_large(send)
                    raise BodyTooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 was sent: the route's own answer is dropped
            started = True
            await send(message)

        await self.app(scope, limited, sending)


async def too_large(send: Send) -> None:
    body = b'{"detail":"' + TOO_LARGE.encode() + b'"}'
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
