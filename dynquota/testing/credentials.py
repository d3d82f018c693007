"""Credentials of the local control plane: its CA and keys, and kubeconfig files.

:func:`make_pki` makes a fresh CA (ECDSA P-256, 30 days), the apiserver's serving certificate
(for localhost, 127.0.0.1 and the in-cluster names) and the ServiceAccount signing key;
:func:`write_kubeconfig` writes a token kubeconfig trusting that CA (the admin's, a
component's, an operator's, a replica's through its proxy); :func:`token_auth_file` the
apiserver's static tokens (the admin's and the components' own identities).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Pki", "make_pki", "token_auth_file", "write_kubeconfig"]


@dataclass
class Pki:
    """PEM bytes: the CA's certificate, the apiserver's serving certificate and key, and the
    ServiceAccount signing key pair."""

    ca_pem: bytes
    serving_cert_pem: bytes
    serving_key_pem: bytes
    sa_key_pem: bytes
    sa_pub_pem: bytes


def make_pki() -> Pki:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dynquota-local-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    return Pki(
        ca_pem=ca.public_bytes(pem),
        serving_cert_pem=cert.public_bytes(pem),
        serving_key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        sa_key_pem=sa_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        sa_pub_pem=sa_key.public_key().public_bytes(
            pem, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def write_kubeconfig(
    path: Path, *, server: str, ca_file: Path, user: str, token: str, context: str = "local"
) -> str:
    """Write a kubeconfig (mode 0600) for ``server`` with the bearer ``token`` of ``user``,
    trusting the CA in ``ca_file`` (PEM), its one context named ``context``; returns the path.
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "local", "user": user}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


def token_auth_file(users: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """The text of kube-apiserver's ``--token-auth-file`` for ``users``: one CSV line
    ``token,user,uid,"group1,group2"`` per ``(token, user, groups)`` (uid: the line's index).
    Every static-token user is also in ``system:authenticated`` (the apiserver adds it)."""
    lines = []
    for uid, (token, user, groups) in enumerate(users):
        group_field = f',"{",".join(groups)}"' if groups else ""
        lines.append(f"{token},{user},{uid}{group_field}\n")
    return "".join(lines)
