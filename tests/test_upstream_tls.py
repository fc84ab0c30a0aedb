"""HTTPS upstreams: every connection to one (the SDK's session and the direct path) verifies it the same way.

A throwaway CA made here signs the certificate of a fixture upstream served over HTTPS on 127.0.0.1. With that CA
as the upstream's `tls.ca_bundle`, calls go through, on the direct path and without it; with no CA configured
(the system's trust store) or another CA, the upstream is down with a reason that says the certificate failed,
and a call of its tool gets an error at once, not a hang.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp.shared.exceptions import MCPError

from consumers.config import UpstreamTlsConfig
from consumers.errors import UpstreamUnavailable
from consumers.transports import ssl_context
from gateway.cli import main
from gateway.runtime import load_config
from tests.conftest import FIXTURE, PYTHON, Proc, marker, start_triad, write_config
from tests.test_gateway_e2e import call, http_session

pytestmark = pytest.mark.anyio


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey,
                 *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem(path: Path, certificate: x509.Certificate) -> Path:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


@dataclass(frozen=True)
class HttpsUpstream:
    url: str
    ca: Path
    """The CA that signed the upstream's certificate."""
    other_ca: Path
    """A CA that did not."""


@pytest.fixture(scope="module")
def https_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsUpstream]:
    folder = tmp_path_factory.mktemp("tls")
    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("Triad test CA", ca_key, "Triad test CA", ca_key, ca=True)
    other = _certificate("Another test CA", other_key, "Another test CA", other_key, ca=True)
    server = _certificate("127.0.0.1", server_key, "Triad test CA", ca_key, ca=False)
    key_file = folder / "server.key"
    key_file.write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    cert_file = _pem(folder / "server.pem", server)
    proc = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--name", marker("https"),
                 "--tls", str(cert_file), str(key_file)])
    try:
        port = proc.wait_for(r"READY (\d+)").group(1)
        yield HttpsUpstream(f"https://127.0.0.1:{port}/mcp", _pem(folder / "ca.pem", ca),
                            _pem(folder / "other-ca.pem", other))
    finally:
        proc.terminate()


CASES = [(ca, direct) for ca in ("right", "none", "wrong") for direct in (True, False)]


@pytest.mark.parametrize(("ca", "direct_path"), CASES,
                         ids=[f"{ca}-ca-direct-path-{'on' if direct else 'off'}" for ca, direct in CASES])
async def test_an_https_upstream_is_verified_against_its_configured_ca(
        ca: str, direct_path: bool, https_upstream: HttpsUpstream, procs: list[Proc], tmp_path: Path) -> None:
    upstream: dict[str, object] = {"url": https_upstream.url, "timeout": "10s", "connect_timeout": "10s"}
    if ca != "none":
        upstream["tls"] = {"ca_bundle": str(https_upstream.ca if ca == "right" else https_upstream.other_ca)}
    config = {"listen": {"direct_path": direct_path}, "naming": {"prefix": "always"}, "upstreams": {"secure": upstream}}
    url = start_triad(procs, write_config(tmp_path, config))
    triad = procs[-1]
    if ca == "right":
        await triad.until(r"upstream secure ready")
        async with http_session(url) as via:
            result = await call(via, "secure__echo", {"text": "over TLS"})
            assert result["content"][0]["text"] == "over TLS"
            result = await call(via, "secure__echo", {"text": "again"})  # the direct path's keep-alive connection
            assert result["content"][0]["text"] == "again"
        return
    down = await triad.until(r"upstream secure is down: (.*)")
    assert "CERTIFICATE_VERIFY_FAILED" in down.group(1), down.group(1)
    async with http_session(url) as via:
        with anyio.fail_after(10), pytest.raises(MCPError) as refused:
            await call(via, "secure__echo", {"text": "no TLS"})
    assert refused.value.error.code == -32602 and "secure__echo" in refused.value.error.message  # hidden: down
    assert "Traceback" not in triad.stderr


def test_tls_files_that_cannot_be_used_are_an_upstream_error_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(UpstreamUnavailable, match=r"tls\.ca_bundle '/nonexistent/ca.pem' cannot be used"):
        ssl_context("secure", UpstreamTlsConfig(ca_bundle="/nonexistent/ca.pem"))
    (tmp_path / "not.pem").write_text("not a certificate")
    with pytest.raises(UpstreamUnavailable, match=r"tls\.client_cert .* cannot be used"):
        ssl_context("secure", UpstreamTlsConfig(client_cert=str(tmp_path / "not.pem")))


def test_a_client_certificate_is_loaded_into_the_context(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = _certificate("triad", key, "triad", key, ca=False)
    (tmp_path / "client.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl_context("secure", UpstreamTlsConfig(client_cert=str(_pem(tmp_path / "client.pem", certificate)),
                                                      client_key=str(tmp_path / "client.key")))
    assert context.verify_mode.name == "CERT_REQUIRED" and context.check_hostname


@pytest.mark.parametrize("key", ["ca_bundle", "client_cert", "client_key"])
@pytest.mark.parametrize("form", ["relative", "nested", "absolute", "home"])
def test_tls_files_are_found_relative_to_the_config_file(key: str, form: str, tmp_path: Path) -> None:
    """As `cwd` and `token_store`: a config works from any working directory."""
    value = {"relative": "ca.pem", "nested": "certs/../certs/ca.pem", "absolute": "/etc/ssl/ca.pem",
             "home": "~/ca.pem"}[form]
    tls = {key: value, **({"client_cert": "cert.pem"} if key == "client_key" else {})}
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    path = config_dir / "triad.yaml"
    path.write_text(json.dumps({"upstreams": {"secure": {"url": "https://127.0.0.1:1/mcp", "tls": tls}}}))
    seen = getattr(load_config(path).enabled_upstreams()["secure"].tls, key)
    expected = {"relative": config_dir / "ca.pem", "nested": config_dir / "certs/../certs/ca.pem",
                "absolute": Path("/etc/ssl/ca.pem"), "home": Path("~/ca.pem").expanduser()}[form]
    assert Path(seen) == expected


@pytest.mark.parametrize("key", ["ca_bundle", "client_cert", "client_key"])
@pytest.mark.parametrize("present", [True, False])
def test_check_warns_of_a_tls_file_that_is_not_there(key: str, present: bool, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The config stays valid (a secret may be mounted later; the upstream is down until then), but `check` says so."""
    files = {key: "file.pem", **({"client_cert": "cert.pem"} if key == "client_key" else {})}
    for name in files.values():
        if present or name != files[key]:
            (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "triad.yaml"
    path.write_text(json.dumps({"upstreams": {"secure": {"url": "https://127.0.0.1:1/mcp", "tls": files}}}))
    assert main(["check", "-c", str(path)]) == 0
    warned = f"upstreams.secure.tls.{key}: file not found" in capsys.readouterr().err
    assert warned is not present
