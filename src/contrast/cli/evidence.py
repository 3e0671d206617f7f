"""`contrast evidence verify`: check an SNP report or TDX quote and print its claims."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    parser = commands.add_parser("evidence", help="inspect attestation evidence")
    sub = parser.add_subparsers(dest="evidence_command", metavar="COMMAND", required=True)
    verify = sub.add_parser("verify", help="verify an SNP report or a TDX quote")
    verify.add_argument("file")
    verify.set_defaults(run=run_verify)


def run_verify(arguments: argparse.Namespace) -> int:
    raise NotImplementedError
