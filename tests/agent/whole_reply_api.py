"""The scripted model server, able to answer a streaming request without a stream.

Some proxies in front of a model API ignore ``"stream": true`` and send the
whole reply as one JSON object (``Content-Type: application/json``): a
``chat.completion`` or a Messages ``message``. :class:`WholeReplyServer` is a
:class:`~fake_api.FakeModelServer` whose script may also hold:

- :class:`Whole`: that reply as one JSON object, whatever the request asked;
- :class:`RawBody`: a 200 answer with any content type and body (an HTML
  login page, a JSON object of the wrong shape, an empty event stream).

Plain :class:`~fake_api.Reply` items are still streamed as usual.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any, Self

import fake_api
from fake_api import FakeModelServer, Reply

__all__ = ["RawBody", "Whole", "WholeReplyServer"]


@dataclass(frozen=True, slots=True)
class Whole:
    """``reply`` sent as one JSON object to a request that asked for a stream."""

    reply: Reply


@dataclass(frozen=True, slots=True)
class RawBody:
    """A 200 answer with exactly this content type and body."""

    content_type: str
    body: bytes


class _WholeHandler(fake_api._Handler):  # pyright: ignore[reportPrivateUsage]
    def _stream(self, api: Any, reply: Any, body: dict[str, Any]) -> None:
        model = str(body.get("model", "fake-model"))
        if isinstance(reply, Whole):
            if api == "openai":
                answer = fake_api._openai_message(reply.reply, model)  # pyright: ignore[reportPrivateUsage]
            else:
                answer = fake_api._anthropic_message(reply.reply, model)  # pyright: ignore[reportPrivateUsage]
            self._json(200, answer)
        elif isinstance(reply, RawBody):
            self.send_response(200)
            self.send_header("content-type", reply.content_type)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        else:
            super()._stream(api, reply, body)


class WholeReplyServer(FakeModelServer):
    """A :class:`~fake_api.FakeModelServer` that also plays :class:`Whole` and :class:`RawBody`."""

    def start(self) -> Self:
        """Start serving on a free port of 127.0.0.1; it accepts connections on return."""
        server = self

        class Handler(_WholeHandler):
            fake = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="whole-reply-model-api",
            daemon=True,
        )
        self._thread.start()
        return self
