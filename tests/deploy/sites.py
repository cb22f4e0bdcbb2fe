"""The shipped TLS site (deploy/nginx/tbhub-tls.conf), made runnable on loopback ports with a
self-signed certificate: the same directives, only the names, ports and paths replaced."""

from __future__ import annotations

import datetime
import ipaddress
import re
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DEPLOY = Path(__file__).parents[2] / "deploy"
SITE = DEPLOY / "nginx" / "tbhub-tls.conf"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "fullchain.pem", directory / "privkey.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def replace_line(text: str, line: str, new: str) -> str:
    """Replace the one line that is exactly `line` (commented copies do not count)."""
    replaced, count = re.subn(rf"^{re.escape(line)}$", lambda _: new, text, flags=re.M)
    assert count == 1, f"the site should hold the line {line!r} once"
    return replaced


def runnable_site(
    directory: Path, *, https_port: int, http_port: int, replicas: list[int]
) -> tuple[Path, Path]:
    """An nginx main config that includes the site, and the certificate it serves."""
    cert, key = self_signed(directory)
    servers = [f"    server 127.0.0.1:{port} max_fails=1 fail_timeout=10s;" for port in replicas]
    site = SITE.read_text()
    for line, new in [
        ("    listen 443 ssl http2;", f"    listen 127.0.0.1:{https_port} ssl http2;"),
        ("    listen 80;", f"    listen 127.0.0.1:{http_port};"),
        ("    ssl_certificate /etc/ssl/tbhub/fullchain.pem;", f"    ssl_certificate {cert};"),
        ("    ssl_certificate_key /etc/ssl/tbhub/privkey.pem;", f"    ssl_certificate_key {key};"),
        ("    server 127.0.0.1:8080 max_fails=1 fail_timeout=10s;", "\n".join(servers)),
    ]:
        site = replace_line(site, line, new)
    site, ipv6 = re.subn(r"^    listen \[::\]:\d+.*\n", "", site, flags=re.M)  # no IPv6 here
    assert ipv6 == 2
    (directory / "site.conf").write_text(site)
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    main = directory / "nginx.conf"
    main.write_text(
        f"""daemon off;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {directory}/tmp/client_body;
    proxy_temp_path {directory}/tmp/proxy;
    fastcgi_temp_path {directory}/tmp/fastcgi;
    uwsgi_temp_path {directory}/tmp/uwsgi;
    scgi_temp_path {directory}/tmp/scgi;
    include {directory}/site.conf;
}}
"""
    )
    return main, cert
