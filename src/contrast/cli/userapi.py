"""`contrast set`, `verify` and `recover`: talk to an attested Coordinator's user API."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from contrast.cli.errors import UsageError
from contrast.client import operations
from contrast.client.workspace import (
    MANIFEST,
    SEED_SHARES,
    SEEDSHARE_OWNER_KEY,
    WORKLOAD_OWNER_KEY,
    Workspace,
)

_POLICY_HASH = re.compile(r"[0-9a-fA-F]{64}")
# One call to the Coordinator; an hour is far beyond any answer it gives.
MAX_TIMEOUT_SECONDS = 3600.0


def register(commands: Any) -> None:
    set_parser = commands.add_parser(
        "set",
        help="attest the Coordinator and set the manifest",
        description="Attest the Coordinator against the manifest's reference values, then set"
        " the manifest together with the policies of the resources in DIR.",
    )
    _common(set_parser)
    set_parser.add_argument(
        "resources",
        nargs="?",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="directory of the generated Kubernetes resources (default: .)",
    )
    set_parser.add_argument(
        "-w",
        "--workload-owner-key",
        type=Path,
        action="append",
        default=[],
        help=f"key that signs manifest updates (default: WORKSPACE/{WORKLOAD_OWNER_KEY})",
    )
    set_parser.set_defaults(run=run_set)

    verify_parser = commands.add_parser(
        "verify",
        help="attest the Coordinator and write what a data owner needs to verify/",
        description="Attest the Coordinator, fetch the manifest history, root and mesh CA and"
        " policies into WORKSPACE/verify, and fail unless the active manifest is the local one.",
    )
    _common(verify_parser)
    verify_parser.set_defaults(run=run_verify)

    recover_parser = commands.add_parser(
        "recover",
        help="attest a restarted Coordinator and give it back the seed",
    )
    _common(recover_parser, coordinator_required=False)  # not to open a share
    recover_parser.add_argument(
        "--seedshare-owner-key",
        type=Path,
        action="append",
        default=[],
        metavar="KEY",
        help=f"RSA key of a seed share owner (default: WORKSPACE/{SEEDSHARE_OWNER_KEY});"
        " repeatable, once per owner, when the manifest's SeedshareThreshold is above 1",
    )
    recover_parser.add_argument(
        "--seed", type=Path, help=f"seed share document (default: WORKSPACE/{SEED_SHARES})"
    )
    recover_parser.add_argument(
        "--share",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a seed share another owner opened with --decrypt-share-to (threshold above 1);"
        " repeatable",
    )
    recover_parser.add_argument(
        "--decrypt-share-to",
        type=Path,
        metavar="FILE",
        help="only open this owner's threshold share into FILE (owner-only) for the operator"
        " who recovers; the Coordinator is not contacted",
    )
    recover_parser.set_defaults(run=run_recover)


def _common(parser: argparse.ArgumentParser, *, coordinator_required: bool = True) -> None:
    parser.add_argument(
        "-c",
        "--coordinator",
        required=coordinator_required,
        metavar="HOST:PORT",
        help="the Coordinator's user API, e.g. 127.0.0.1:1313",
    )
    parser.add_argument(
        "-m", "--manifest", type=Path, help=f"manifest (default: WORKSPACE/{MANIFEST})"
    )
    parser.add_argument(
        "--workspace-dir",
        type=Path,
        default=Path("."),
        metavar="WORKSPACE",
        help="directory of the workspace files (default: .)",
    )
    parser.add_argument(
        "--coordinator-policy-hash",
        action="append",
        default=[],
        metavar="HEX",
        help="accept a Coordinator with this policy hash (default: the manifest's coordinator"
        " entries)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")


def _policy_hash(value: str) -> str:
    if not _POLICY_HASH.fullmatch(value):
        raise UsageError(
            f"--coordinator-policy-hash {value!r} is not a policy hash",
            hint="give the 64 hex digits of the Coordinator's policy hash",
        )
    return value.lower()


def _timeout(value: float) -> float:
    # gRPC turns the timeout into a deadline: NaN, negative and huge values break it.
    if not 0 < value <= MAX_TIMEOUT_SECONDS:  # also false for NaN
        raise UsageError(
            f"--timeout {value} is not a number of seconds",
            hint=f"give more than 0 and at most {MAX_TIMEOUT_SECONDS} seconds",
        )
    return value


def _target(arguments: argparse.Namespace) -> tuple[operations.Target, Workspace]:
    workspace = Workspace(arguments.workspace_dir)
    target = operations.Target(
        address=arguments.coordinator,
        manifest_path=arguments.manifest or workspace.path(MANIFEST),
        coordinator_policy_hashes=tuple(map(_policy_hash, arguments.coordinator_policy_hash)),
        timeout=_timeout(arguments.timeout),
    )
    return target, workspace


def run_set(arguments: argparse.Namespace) -> int:
    target, workspace = _target(arguments)
    if not arguments.resources.is_dir():
        raise UsageError(
            f"{arguments.resources} is not a directory",
            hint="pass the directory of the resources contrast generate wrote",
        )
    keys = arguments.workload_owner_key or [workspace.path(WORKLOAD_OWNER_KEY)]
    result = operations.set_manifest(
        target, workspace, arguments.resources, workload_owner_keys=keys
    )
    if result.replaced_history is not None:
        _warn(
            f"the Coordinator had no manifest, but this workspace last saw transition"
            f" {result.replaced_history.hex()} of another history: a new history begins (if"
            " this is not a new deployment, the Coordinator's state was lost)"
        )
    if result.kept_seed_shares is not None:
        _warn(
            f"the Coordinator sent new seed shares: the previous ones are kept in"
            f" {result.kept_seed_shares} (they recover the state the old seed protects)"
        )
    print("✔ Manifest set" + (" (first manifest)" if result.first else " (update)"))
    for path in result.written:
        print(f"  wrote {path}")
    return 0


def run_verify(arguments: argparse.Namespace) -> int:
    target, workspace = _target(arguments)
    result = operations.verify(target, workspace)
    if not result.seen.checkable:
        _warn(result.seen.unchecked_warning())
    print(f"✔ Verified: the active manifest is {target.manifest_path}")
    print(f"  wrote {result.directory} ({result.manifests} manifests in the history)")
    for warning in result.debug_warnings:
        _warn(warning)
    return 0


def run_recover(arguments: argparse.Namespace) -> int:
    target, workspace = _target(arguments)  # the address is checked below, once it is needed
    seed_shares = arguments.seed or workspace.path(SEED_SHARES)
    keys = arguments.seedshare_owner_key
    if arguments.decrypt_share_to is not None:
        if len(keys) > 1 or arguments.share:
            raise UsageError("--decrypt-share-to opens one owner's share: pass one key")
        written = operations.decrypt_share(
            workspace,
            seedshare_owner_key=keys[0] if keys else workspace.path(SEEDSHARE_OWNER_KEY),
            seed_shares=seed_shares,
            output=arguments.decrypt_share_to,
        )
        print(f"✔ Seed share opened into {written} (owner-only): hand it to whoever recovers")
        return 0
    if arguments.coordinator is None:
        raise UsageError(
            "recover needs the Coordinator: pass -c HOST:PORT",
            hint="only --decrypt-share-to works without it",
        )
    if not keys and not arguments.share:
        keys = [workspace.path(SEEDSHARE_OWNER_KEY)]
    seen = operations.recover(
        target, workspace, seedshare_owner_key=keys, seed_shares=seed_shares, shares=arguments.share
    )
    if not seen.checkable:
        _warn(seen.unchecked_warning())
    print("✔ Coordinator recovered")
    return 0


def _warn(message: str) -> None:
    print(f"contrast: warning: {message}", file=sys.stderr)
