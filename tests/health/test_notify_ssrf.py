"""Safe outbound requests: every form of a local address is refused when a channel is saved
and again when it sends; redirects are never followed; the request goes to the address that
was checked; answers are bounded in size and time."""

from __future__ import annotations

import ipaddress
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbhub.core.errors import InvalidInput
from tbhub.core.settings import Settings
from tbhub.health.notify.outbound import DeliveryFailed, post
from tbhub.health.notify.ssrf import IPAddress, Resolver, check_url
from tests.api.conftest import Team
from tests.health.notify_receivers import WebhookReceiver, make_certificate

REFUSED = {
    "file://": "file:///etc/passwd",
    "gopher://": "gopher://127.0.0.1:25/",
    "no scheme": "example.org/hook",
    "loopback": "http://127.0.0.1:8080/hook",
    "a name resolving to loopback": "http://localhost/hook",
    "IPv6 loopback": "http://[::1]/hook",
    "IPv4-mapped IPv6": "http://[::ffff:127.0.0.1]/hook",
    "IPv4-mapped IPv6, hex": "http://[::ffff:7f00:1]/hook",
    "decimal IPv4": "http://2130706433/hook",
    "octal IPv4": "http://0177.0.0.1/hook",
    "hex IPv4": "http://0x7f.0.0.1/hook",
    "short IPv4": "http://127.1/hook",
    "cloud metadata": "http://169.254.169.254/latest/meta-data/",
    "private 10/8": "http://10.1.2.3/hook",
    "private 192.168/16": "https://192.168.1.1/hook",
    "shared 100.64/10": "http://100.64.0.1/hook",
    "unique-local IPv6": "http://[fd00::1]/hook",
    "link-local IPv6": "http://[fe80::1]/hook",
    "unspecified": "http://0.0.0.0/hook",
    "6to4 of loopback": "http://[2002:7f00:1::]/hook",
    "credentials in the URL": "https://user:password@example.org/hook",
}


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_each_local_form_is_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        check_url(url)


def test_the_refusal_says_why() -> None:
    with pytest.raises(
        InvalidInput, match=r"localhost resolves to 127\.0\.0\.1, a loopback address"
    ):
        check_url("http://localhost:9/hook")
    with pytest.raises(InvalidInput, match="decimal, octal or hex spelling"):
        check_url("http://2130706433/")
    with pytest.raises(InvalidInput, match=r"link-local address \(where cloud metadata lives\)"):
        check_url("http://169.254.169.254/")
    with pytest.raises(InvalidInput, match="file:// is not allowed"):
        check_url("file:///etc/passwd")


def test_a_public_address_passes_and_every_address_of_a_name_is_checked() -> None:
    public = ipaddress.ip_address("93.184.216.34")
    assert check_url("https://93.184.216.34/hook").address == public

    def resolver(answers: list[str]) -> Resolver:
        return lambda host, port: [ipaddress.ip_address(a) for a in answers]

    found = check_url("https://hooks.example.org/x", resolver=resolver(["93.184.216.34"]))
    assert (found.host, found.port, found.address) == ("hooks.example.org", 443, public)
    with pytest.raises(InvalidInput, match=r"resolves to 127\.0\.0\.1"):
        check_url("https://hooks.example.org/x",
                  resolver=resolver(["93.184.216.34", "127.0.0.1"]))  # fmt: skip


def test_an_allowed_range_opens_only_itself() -> None:
    allow = [ipaddress.ip_network("127.0.0.2/32")]
    assert str(check_url("http://127.0.0.2:9/", allow=allow).address) == "127.0.0.2"
    for url in ("http://127.0.0.1:9/", "http://[::ffff:127.0.0.2]:9/", "http://2130706434/"):
        with pytest.raises(InvalidInput):
            check_url(url, allow=allow)


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_the_api_refuses_each_form_when_a_channel_is_saved(team: Team, url: str) -> None:
    headers = team.headers("alice")
    response = team.client.post("/api/v1/projects/vision/channels", headers=headers,
                                json={"kind": "webhook", "name": "hook", "url": url})  # fmt: skip
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_input"
    listed = team.client.get("/api/v1/projects/vision/channels", headers=headers).json()
    assert listed == {"channels": []}


# -- at send time, with real receivers ------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver("127.0.0.1") as server:
        yield server


def allowing(settings: Settings, *networks: str, timeout: float = 5.0) -> Settings:
    return settings.model_copy(
        update={"notify_allow_networks": list(networks), "notify_timeout": timeout}
    )


def test_a_redirect_to_loopback_is_not_followed(
    settings: Settings, receiver: WebhookReceiver
) -> None:
    """The allowed receiver answers 302 to 127.0.0.1, where another server listens: the
    send fails, naming the redirect, and nothing reaches 127.0.0.1."""
    with WebhookReceiver("127.0.0.2") as redirector:
        redirector.answer.status, redirector.answer.location = 302, receiver.url("/internal")
        with pytest.raises(DeliveryFailed, match="answered 302, a redirect; redirects are never"):
            post(allowing(settings, "127.0.0.2/32"), redirector.url(), b"{}", {})
        assert len(redirector.received) == 1
    assert receiver.received == []


def test_the_check_runs_again_at_send_time(settings: Settings, receiver: WebhookReceiver) -> None:
    """Saved while an admin allowed loopback; sent after the allowance is gone: refused."""
    check_url(receiver.url(), allow=[ipaddress.ip_network("127.0.0.1/32")])
    with pytest.raises(DeliveryFailed, match=r"refused: 127\.0\.0\.1 is a loopback address"):
        post(allowing(settings), receiver.url(), b"{}", {})
    assert receiver.received == []


def test_the_request_goes_to_the_address_that_was_checked(
    settings: Settings, receiver: WebhookReceiver
) -> None:
    """A name resolved once, to an allowed address: the connection goes there (a second
    lookup of this name would find nothing), with the name in the Host header."""
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return [ipaddress.ip_address("127.0.0.1")]

    url = f"http://hooks.example.test:{receiver.port}/hook"
    post(allowing(settings, "127.0.0.1/32"), url, b'{"a":1}', {"X-Test": "1"}, resolver=resolver)
    (request,) = receiver.wait_for(1)
    assert lookups == ["hooks.example.test"]
    assert request.headers["Host"] == f"hooks.example.test:{receiver.port}"
    assert (request.path, request.body, request.headers["X-Test"]) == ("/hook", b'{"a":1}', "1")


def test_an_answer_is_read_only_up_to_the_cap(
    settings: Settings, receiver: WebhookReceiver
) -> None:
    receiver.answer.body = b"x" * (4 * 1024 * 1024)
    capped = allowing(settings, "127.0.0.1/32").model_copy(
        update={"notify_max_response_bytes": 8192}
    )
    answer = post(capped, receiver.url(), b"{}", {})
    assert (answer.status, len(answer.body)) == (200, 8192)


def test_a_slow_receiver_times_out(settings: Settings, receiver: WebhookReceiver) -> None:
    receiver.answer.delay = 3.0
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match="did not answer within 1 s"):
        post(allowing(settings, "127.0.0.1/32", timeout=1.0), receiver.url(), b"{}", {})
    assert time.monotonic() - started < 2.5


def test_the_test_button_reports_a_refused_redirect(
    team: Team,
    receiver: WebhookReceiver,
) -> None:
    """Through the API: a channel whose receiver redirects; `send a test` says why it failed
    and the channel shows it."""
    context = team.client.app.state.context  # type: ignore[attr-defined]
    context.settings = allowing(context.settings, "127.0.0.2/32")
    with WebhookReceiver("127.0.0.2") as redirector:
        redirector.answer.status, redirector.answer.location = 307, receiver.url()
        headers = team.headers("alice")
        made = team.client.post("/api/v1/projects/vision/channels", headers=headers, json={
            "kind": "webhook", "name": "hook", "url": redirector.url(),
        })  # fmt: skip
        assert made.status_code == 201, made.text
        tried = team.client.post(
            f"/api/v1/projects/vision/channels/{made.json()['id']}/test", headers=headers
        )
    assert tried.status_code == 200
    assert tried.json()["delivered"] is False
    assert "answered 307, a redirect" in tried.json()["error"]
    shown = team.client.get(f"/api/v1/projects/vision/channels/{made.json()['id']}",
                            headers=headers).json()  # fmt: skip
    assert "answered 307, a redirect" in shown["last_error"]
    assert receiver.received == []


def test_an_https_receiver_must_have_a_certificate_the_system_trusts(
    settings: Settings, tmp_path: Path
) -> None:
    """TLS is verified against the URL's host: a server with a certificate from an
    authority the system does not know is refused before anything is sent."""
    _ca, certificate, key = make_certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certificate), str(key))
    receiver = WebhookReceiver("127.0.0.1")
    receiver.server.socket = context.wrap_socket(receiver.server.socket, server_side=True)
    with receiver:
        url = f"https://127.0.0.1:{receiver.port}/hook"
        with pytest.raises(
            DeliveryFailed, match=r"could not reach 127\.0\.0\.1: .*CERTIFICATE_VERIFY_FAILED"
        ):
            post(allowing(settings, "127.0.0.1/32"), url, b"{}", {})
        assert receiver.received == []
