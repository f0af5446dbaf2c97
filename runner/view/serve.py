"""``deltarun view RUN``: the viewer served over HTTP from this process.

Bound to 127.0.0.1 by default, where requests must name that host (no DNS rebinding).
Bound to any other address, every request must carry a token: the printed URL has it
(``?token=``), and the first page sets it as a same-site cookie for the rest. The index is
rebuilt when the ledger grows (a run in progress); a trial's detail is read from the
ledger, by its line's offset, when the page asks for it.
"""

from __future__ import annotations

import errno
import hmac
import re
import secrets
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from runner.errors import UserError
from runner.view.assets import HEADER_CSP, data_script, static_files
from runner.view.source import RunSource

LOOPBACK = ("127.0.0.1", "localhost", "::1")
COOKIE = "deltarun_view"
TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript"}
_TRIAL = re.compile(r"^/data/trial/([0-9]{1,12})\.js\Z")


class ViewServer(ThreadingHTTPServer):
    """The HTTP server of one run; ``token`` is None on a loopback address."""

    daemon_threads = True

    def __init__(self, source: RunSource, host: str, port: int, token: str | None) -> None:
        self.source = source
        self.token = token
        self.files = static_files()
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(
                    f"port {port} on {host} is in use; pick another with --port"
                ) from exc
            raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from exc

    @property
    def url(self) -> str:
        host, port = self.server_address[0], self.server_address[1]
        text = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{text}]" if ":" in text else text
        query = f"?token={self.token}" if self.token else ""
        return f"http://{shown}:{port}/{query}"


def open_server(source: RunSource, host: str, port: int) -> ViewServer:
    """A server for ``source`` on ``host:port``, with a fresh token off the loopback."""
    token = None if host in LOOPBACK else secrets.token_urlsafe(24)
    return ViewServer(source, host, port, token)


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "deltarun-view"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the terminal shows the URL, not every request

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        cookie = self._allowed(parts.query)
        if cookie is None:
            return
        body = self._body(parts.path)
        if body is None:
            self._send(404, "text/plain", b"not found\n")
            return
        suffix = parts.path[parts.path.rfind(".") :] if "." in parts.path else ".html"
        self._send(200, TYPES.get(suffix, "text/plain"), body.encode("utf-8"), cookie)

    def _allowed(self, query: str) -> str | None:
        """ "" or a cookie to set when the request may proceed; None after refusing it."""
        token = self.server.token
        if token is None:
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
            if host not in LOOPBACK:
                self._send(403, "text/plain", b"forbidden: unexpected Host header\n")
                return None
            return ""
        given = parse_qs(query).get("token", [""])[0]
        if given and hmac.compare_digest(given, token):
            return f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        jar = SimpleCookie(self.headers.get("Cookie") or "")
        held = jar[COOKIE].value if COOKIE in jar else ""
        if held and hmac.compare_digest(held, token):
            return ""
        self._send(403, "text/plain", b"forbidden: open the URL with its ?token= first\n")
        return None

    def _body(self, path: str) -> str | None:
        name = "index.html" if path in ("/", "") else path.lstrip("/")
        if name in self.server.files:
            return self.server.files[name]
        source = self.server.source
        if name == "data/index.js":
            return data_script("index", 0, {"matrix": source.index(), "run": source.run_page()})
        match = _TRIAL.match(path)
        if match is None:
            return None
        detail = source.trial(int(match.group(1)))
        return None if detail is None else data_script("trial", int(match.group(1)), detail)

    def _send(self, status: int, kind: str, body: bytes, cookie: str = "") -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", HEADER_CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        if cookie:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)
