"""`contrast demo`: the embedded default, end to end on this machine."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from contrast.atls.issuers import TeeKind
from contrast.cli.errors import CliError, UsageError
from contrast.imagebuild.cli import main as build_images
from contrast.local.demo import run_demo


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="run Coordinator and workloads locally on the emulated TEE, end to end",
        description="Start three Coordinator replicas and emulated workloads as local processes,"
        " set a manifest, get mesh certificates, talk mutual TLS, verify, kill a replica and see"
        " it rejoin by peer recovery, kill all three and recover them, and let a new workload"
        " join. Needs no TEE and no cluster.",
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
    parser.add_argument(
        "--containers", action="store_true",
        help="run the Coordinator, Initializers and proxies as containers of the release images"
        " (needs root, containerd, runc, skopeo and docker-registry)",
    )  # fmt: skip
    parser.add_argument(
        "--images", type=Path, metavar="DIR",
        help="with --containers or --kubernetes: the OCI layout contrast-build-images wrote"
        " (default: build one into the work directory)",
    )  # fmt: skip
    parser.add_argument(
        "--kubernetes", type=Path, metavar="CLUSTER_DIR",
        help="instead: deploy examples/mesh-app as a user does on the running cluster of"
        " `scripts/cluster.sh up CLUSTER_DIR` with the emulated runtime installed"
        " (`cluster.sh install-runtime`), set, verify, talk mutual TLS and update it; from a"
        " source checkout, as root",
    )  # fmt: skip
    parser.add_argument(
        "--keep", action="store_true", help="with --kubernetes: keep the demo's namespace"
    )
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    workdir = arguments.workdir or Path(tempfile.mkdtemp(prefix="contrast-demo-"))
    images = None
    if arguments.kubernetes is not None:
        from contrast.local.kubedemo import run_kubernetes_demo  # noqa: PLC0415 - only here

        images = arguments.images or _build_images(workdir / "images")
        run_kubernetes_demo(arguments.kubernetes, workdir, images, keep=arguments.keep)
        return 0
    if arguments.containers:
        images = arguments.images or _build_images(workdir / "images")
    elif arguments.images is not None:
        raise UsageError("--images is for --containers", hint="add --containers")
    run_demo(workdir, tee=arguments.tee, images=images)
    return 0


def _build_images(layout: Path) -> Path:
    """The release images of this source tree, built once into the work directory."""
    if not (layout / "index.json").exists():
        print(f"building the release images into {layout} (a few minutes, once)")
        if build_images(["--output", str(layout)]) != 0:
            raise CliError("the release images could not be built (see above)")
    return layout
