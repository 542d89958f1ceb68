"""The loopback end of a browser sign-in: a one-shot HTTP server that receives the authorization redirect
(the code and state in its query, never logged). Only the redirect of the sign-in under way counts: one
carrying another ``state`` (any local program or web page can reach a loopback port) is refused and the
sign-in waits on, so nobody can end it or put words in its error."""

from __future__ import annotations

import threading
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

__all__ = ["CALLBACK_PATH", "Callback"]

CALLBACK_PATH: Final = "/callback"


class Callback:
    """A one-shot HTTP server on loopback that receives the authorization redirect."""

    def __init__(self, port: int) -> None:
        from http.server import BaseHTTPRequestHandler, HTTPServer  # (a sign-in only: not imported at start-up)

        received: dict[str, str] = {}
        done = threading.Event()
        self.received, self.done = received, done
        self.state: str | None = None
        """The ``state`` of the authorization request under way (None: none sent yet, nothing is taken)."""
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != CALLBACK_PATH:
                    self.send_error(404)
                    return
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if callback.state is None or query.get("state") != callback.state:
                    self.send_error(400, "This is not the sign-in mcpvisor is waiting for")
                    return
                ok = "code" in query
                body = (
                    "Signed in: you can close this tab and go back to mcpvisor."
                    if ok
                    else f"Sign-in failed: {query.get('error_description') or query.get('error') or 'no code'}."
                )
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.end_headers()
                self.wfile.write(body.encode())
                if not done.is_set():
                    received.update(query)
                    done.set()

            def log_message(self, format: str, *args: Any) -> None:
                return  # the query holds the code: never logged

        self.server = HTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    def reset(self, authorization_url: str) -> None:
        """Ready for the redirect that answers ``authorization_url`` (one sign-in may authorize twice)."""
        self.state = parse_qs(urlsplit(authorization_url).query).get("state", [""])[0] or None
        self.received.clear()
        self.done.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.done.set()  # a worker thread still waiting for the redirect (a cancelled sign-in) ends now
