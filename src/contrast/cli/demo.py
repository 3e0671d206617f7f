"""`contrast demo`: the embedded default, end to end on this machine."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from contrast.atls.issuers import TeeKind
from contrast.local.demo import run_demo


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="run Coordinator and workloads locally on the emulated TEE, end to end",
        description="Start a Coordinator and emulated workloads as local processes, set a"
        " manifest, get mesh certificates, talk mutual TLS, verify, kill and recover the"
        " Coordinator, and let a new workload join. Needs no TEE and no cluster.",
    )
    parser.add_argument(
        "--workdir", type=Path,
        help="where to keep the workspace, state, certificates and logs (default: a new"
        " temporary directory)",
    )  # fmt: skip
    parser.add_argument(
        "--tee",
        type=TeeKind,
        choices=[TeeKind.EMULATED_SNP, TeeKind.EMULATED_TDX],
        default=TeeKind.EMULATED_SNP,
        help="which TEE to emulate (default: emulated-snp)",
    )
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    workdir = arguments.workdir or Path(tempfile.mkdtemp(prefix="contrast-demo-"))
    run_demo(workdir, tee=arguments.tee)
    return 0
