"""TLS flags shared by the commands that serve or call over the network.

Server side: `--tls-cert/--tls-key[/--tls-client-ca]` (the router's HTTP and gRPC front ends, the
control plane). Client side: `--<peer>-tls-ca/--<peer>-tls-cert/--<peer>-tls-key` (the router and
operator commands towards the control plane, the router towards replicas).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.config.schema import ServerTlsSpec
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.security.files import TlsFiles


def add_server_flags(parser: argparse.ArgumentParser, *, what: str, client_ca_help: str) -> None:
    group = parser.add_argument_group("TLS")
    group.add_argument("--tls-cert", type=Path, help=f"serve {what} over TLS with this PEM chain")
    group.add_argument("--tls-key", type=Path, help="the private key of --tls-cert (PEM)")
    group.add_argument("--tls-client-ca", type=Path, help=client_ca_help)


def server_files(
    args: argparse.Namespace,
    *,
    client_ca_required: bool = False,
    config: ServerTlsSpec | None = None,
) -> TlsFiles | None:
    """The server TLS files the flags name (else `config`'s), None for plaintext; a partial set
    is an error."""
    cert, key, ca = args.tls_cert, args.tls_key, args.tls_client_ca
    if cert is None and key is None and ca is None:
        if config is None:
            return None
        cert, key = Path(config.cert_file), Path(config.key_file)
        ca = None if config.client_ca_file is None else Path(config.client_ca_file)
    if cert is None or key is None:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "--tls-cert and --tls-key go together (and --tls-client-ca needs them)",
            param="tls-cert",
        )
    if client_ca_required and ca is None:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "--tls-client-ca is required with --tls-cert here: callers must present a "
            "certificate signed by it (mutual TLS)",
            param="tls-client-ca",
        )
    files = TlsFiles(cert, key, ca, flag="--tls", ca_role="client-ca")
    files.read()  # fail now, naming the flag, rather than at the first handshake
    return files


def add_client_flags(parser: argparse.ArgumentParser, peer: str, *, what: str) -> None:
    group = parser.add_argument_group(f"TLS to {what}")
    group.add_argument(
        f"--{peer}-tls-ca", type=Path, help=f"connect to {what} over TLS, verified by this CA"
    )
    group.add_argument(f"--{peer}-tls-cert", type=Path, help=f"certificate to present to {what}")
    group.add_argument(f"--{peer}-tls-key", type=Path, help=f"private key of --{peer}-tls-cert")


def client_files(args: argparse.Namespace, peer: str) -> TlsFiles | None:
    """The client TLS files the `--<peer>-tls-*` flags name, None for plaintext."""
    attribute = peer.replace("-", "_")
    ca = getattr(args, f"{attribute}_tls_ca")
    cert = getattr(args, f"{attribute}_tls_cert")
    key = getattr(args, f"{attribute}_tls_key")
    if ca is None and cert is None and key is None:
        return None
    files = TlsFiles(cert, key, ca, flag=f"--{peer}-tls")
    files.read()
    return files
