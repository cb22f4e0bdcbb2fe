"""Real receivers on loopback for the notification tests: an HTTP server recording each POST
(it can answer with a status, a redirect, a large body or after a delay) and an SMTP server
(aiosmtpd) with STARTTLS and a login, its certificate signed by a CA made for the test."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.ports import free_port

T = TypeVar("T")


def wait_for_items(items: list[T], count: int, timeout: float, what: str) -> list[T]:
    """`items` once a receiver thread has put at least `count` in it."""
    deadline = time.monotonic() + timeout
    while len(items) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(items) >= count, f"got {len(items)} {what}, not {count}"
    return items


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    location: str | None = None
    body: bytes = b"ok"
    delay: float = 0.0


class WebhookReceiver:
    """An HTTP server on `host` (a loopback address) that records every request."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.received: list[Received] = []
        self.answer = Answer()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                answer = receiver.answer
                time.sleep(answer.delay)
                self.send_response(answer.status)
                if answer.location:
                    self.send_header("Location", answer.location)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client stopped reading (the cap)
                    self.wfile.write(answer.body)

            do_GET = do_POST  # a followed redirect would come as a GET

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = host, int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        return wait_for_items(self.received, count, timeout, "requests")


def signature_ok(secret: str, request: Received, *, max_age: float = 300) -> bool:
    """What a receiver does, from the documented scheme: HMAC-SHA256 over
    `<X-Tbhub-Timestamp>.<body>`, in `X-Tbhub-Signature: sha256=<hex>`, and a fresh stamp."""
    stamp = request.headers["X-Tbhub-Timestamp"]
    want = hmac.new(secret.encode(), stamp.encode() + b"." + request.body, hashlib.sha256)
    given = request.headers["X-Tbhub-Signature"]
    fresh = abs(time.time() - int(stamp)) <= max_age
    return fresh and hmac.compare_digest(given, "sha256=" + want.hexdigest())


# -- SMTP -------------------------------------------------------------------------------------


@dataclass
class Mailbox:
    """What the SMTP server received, and the logins it saw."""

    messages: list[Message] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    tls: list[bool] = field(default_factory=list)  # per message: sent over TLS

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.messages.append(message_from_bytes(envelope.content))
        self.envelopes.append((str(envelope.mail_from), list(envelope.rcpt_tos)))
        self.tls.append(session.ssl is not None)
        return "250 OK"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Message]:
        return wait_for_items(self.messages, count, timeout, "emails")


def make_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 and localhost that it signed:
    (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(name("test CA")).issuer_name(name("test CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    alt = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    server = (
        x509.CertificateBuilder().subject_name(name("localhost")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .add_extension(alt, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))  # fmt: skip
    return paths


class SmtpServer:
    """aiosmtpd on 127.0.0.1. With `certificates`: STARTTLS required (or, `implicit_tls`,
    TLS from the first byte), and a login (`user`/`password`) required over it. Without:
    plain SMTP with no STARTTLS at all."""

    def __init__(
        self, certificates: tuple[Path, Path, Path] | None = None, *,
        user: str = "mailer", password: str = "correct horse battery", implicit_tls: bool = False,
    ) -> None:  # fmt: skip
        import ssl

        self.mailbox = Mailbox()
        self.port = free_port()
        self.user, self.password = user, password
        kwargs: dict[str, Any] = {}
        if certificates is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(certificates[1]), str(certificates[2]))
            kwargs = {"authenticator": self._authenticate, "auth_required": True}
            if implicit_tls:  # aiosmtpd counts only STARTTLS as TLS for AUTH: say it is
                kwargs.update(ssl_context=context, auth_require_tls=False)
            else:
                kwargs.update(tls_context=context, require_starttls=True)
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port, **kwargs)

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (isinstance(data, LoginPassword) and data.login.decode() == self.user
              and data.password.decode() == self.password)  # fmt: skip
        if ok:
            self.mailbox.logins.append(self.user)
        return AuthResult(success=ok)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.controller.stop()
