"""Loopback stand-ins for Slack and a mail server, recording what Alertmanager sends them.

    slack = SlackSink().start()        # slack.url → Alertmanager's slack_api_url
    mail = SmtpSink().start()          # mail.address → smtp_smarthost
    slack.texts()                      # every message's title + text, as Slack would show it
    mail.messages()                    # every mail, parsed (email.message.Message)

Both speak just enough of their protocol for Alertmanager's clients: a JSON POST answered "ok", and SMTP
without TLS or AUTH (EHLO, MAIL, RCPT, DATA, QUIT).
"""

from __future__ import annotations

import email
import email.policy
import json
import socketserver
import threading
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SlackSink:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._payloads: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with sink._lock:
                    sink._payloads.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/services/test/hook"

    def start(self) -> SlackSink:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def payloads(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._payloads)

    def texts(self) -> list[str]:
        """Each Slack message as one string: attachment titles and texts."""
        found = []
        for payload in self.payloads():
            parts = [payload.get("text", "")]
            for attachment in payload.get("attachments", []):
                parts += [attachment.get("title", ""), attachment.get("text", "")]
            found.append("\n".join(p for p in parts if p))
        return found


class _SmtpHandler(socketserver.StreamRequestHandler):
    server: _SmtpServer

    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self) -> None:
        self.reply("220 sink.test ESMTP")
        data_mode, lines = False, list[str]()
        for raw in self.rfile:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if data_mode:
                if line == ".":
                    data_mode = False
                    self.server.record("\r\n".join(lines))
                    lines = []
                    self.reply("250 OK queued")
                else:
                    lines.append(line[1:] if line.startswith("..") else line)
                continue
            verb = line.split(" ", 1)[0].upper()
            if verb == "EHLO":
                self.reply("250-sink.test")
                self.reply("250 8BITMIME")
            elif verb in ("HELO", "MAIL", "RCPT", "RSET", "NOOP"):
                self.reply("250 OK")
            elif verb == "DATA":
                data_mode = True
                self.reply("354 end with <CRLF>.<CRLF>")
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("502 not implemented")


class _SmtpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SmtpHandler)
        self.lock = threading.Lock()
        self.raw: list[str] = []

    def record(self, message: str) -> None:
        with self.lock:
            self.raw.append(message)


class SmtpSink:
    def __init__(self) -> None:
        self._server = _SmtpServer()
        self.address = f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SmtpSink:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def messages(self) -> list[Message]:
        with self._server.lock:
            raw = list(self._server.raw)
        return [email.message_from_string(text, policy=email.policy.default) for text in raw]

    def texts(self) -> list[str]:
        """Each mail as subject + plain-text body."""
        found = []
        for message in self.messages():
            body = message.get_body(preferencelist=("plain", "html"))  # type: ignore[attr-defined]
            found.append(f"{message['Subject']}\n{body.get_content() if body else ''}")
        return found
