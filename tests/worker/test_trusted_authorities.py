"""A worker delivers to an https receiver whose certificate a private CA signed, once told to
trust that CA (``DEALBASE_WEBHOOKS_CA_BUNDLE``, or the standard ``SSL_CERT_FILE``), and refuses
it otherwise. The CA and the receiver's certificate are made by ``openssl`` for the test; the
receiver listens on the loopback."""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dealbase.platform.webhooks.addresses import AddressPolicy
from dealbase.platform.webhooks.delivery_models import Outgoing, Response
from dealbase.worker.sending import Sender, trusted_authorities
from tests.worker.test_worker_cli import start_worker


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the private CA's certificate
    server: Path  # the receiver's certificate (for localhost and 127.0.0.1), signed by the CA
    key: Path  # the receiver's key


def _openssl(*arguments: str | Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    made = tmp_path_factory.mktemp("tls")
    ca, ca_key = made / "ca.pem", made / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=dealbase test CA", "-keyout", ca_key, "-out", ca,
    )  # fmt: skip
    key, request, server = made / "server.key", made / "server.csr", made / "server.pem"
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", key, "-out", request,
    )  # fmt: skip
    names = made / "names.ext"
    names.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", "2", "-extfile", names, "-out", server,
    )  # fmt: skip
    return Certificates(ca, server, key)


async def _with_receiver(
    certificates: Certificates, then: Callable[[int], Awaitable[Response]]
) -> Response:
    """Runs ``then(port)`` while an https receiver on the loopback answers 204 to any POST."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.server, certificates.key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
            await writer.drain()
        except (ssl.SSLError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a client that refused the certificate hangs up
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        return await then(port)
    finally:
        server.close()
        await server.wait_closed()


def _delivery(port: int) -> Outgoing:
    now = datetime.now(UTC)
    return Outgoing(
        delivery_id=uuid.uuid4(),
        endpoint_id=uuid.uuid4(),
        url=f"https://localhost:{port}/hooks",
        secrets=("whsec_" + base64.b64encode(bytes(32)).decode(),),
        message_id=str(uuid.uuid4()),
        body=b'{"type": "customer.created"}',
        attempt_count=0,
        started_at=now,
        leased_until=now + timedelta(minutes=1),
        failing_since=None,
    )


def _sent_by(sender: Sender, certificates: Certificates) -> Response:
    async def send(port: int) -> Response:
        try:
            return await sender.send(_delivery(port), datetime.now(UTC))
        finally:
            await sender.close()

    return asyncio.run(_with_receiver(certificates, send))


LOOPBACK = AddressPolicy(allow_private=True)


def test_a_receiver_signed_by_an_unknown_ca_is_refused(certificates: Certificates) -> None:
    response = _sent_by(Sender(LOOPBACK), certificates)

    assert response.status_code is None
    assert response.error is not None
    assert "CERTIFICATE_VERIFY_FAILED" in response.error


def test_the_ca_bundle_setting_makes_the_private_ca_trusted(certificates: Certificates) -> None:
    response = _sent_by(Sender(LOOPBACK, trusted_authorities(certificates.ca)), certificates)

    assert (response.status_code, response.error) == (204, None)


def test_the_standard_ssl_cert_file_is_trusted_too(
    certificates: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))

    response = _sent_by(Sender(LOOPBACK, trusted_authorities()), certificates)

    assert (response.status_code, response.error) == (204, None)


def test_the_public_cas_stay_trusted_beside_the_bundle(certificates: Certificates) -> None:
    with_bundle = trusted_authorities(certificates.ca)
    public_only = trusted_authorities()

    subjects = {str(each["subject"]) for each in with_bundle.get_ca_certs()}
    assert {str(each["subject"]) for each in public_only.get_ca_certs()} < subjects
    assert any("dealbase test CA" in subject for subject in subjects)


def test_a_worker_told_a_file_without_certificates_stops_with_one_line(
    worker_database_url: str, tmp_path: Path
) -> None:
    bundle = tmp_path / "not-a-bundle.pem"
    bundle.write_text("not a certificate\n")

    process, log = start_worker(
        worker_database_url, tmp_path, DEALBASE_WEBHOOKS_CA_BUNDLE=str(bundle)
    )

    assert process.wait(timeout=60) == 2
    lines = log.read_text().strip().splitlines()
    assert lines[-1].startswith("error: The certificate authorities to trust"), lines
    assert "Traceback" not in log.read_text()
