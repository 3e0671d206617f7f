"""`contrast generate`: turn Kubernetes YAML into confidential workloads and write the manifest."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from contrast.cli.errors import UsageError
from contrast.cli.imagereplace import add_image_replacements, image_replacements
from contrast.client.workspace import MANIFEST, SEEDSHARE_OWNER_KEY, WORKLOAD_OWNER_KEY
from contrast.generate import pipeline
from contrast.platforms import PLATFORMS, by_name

RULES = "rules.rego"
SETTINGS = "settings.json"
LAYERS_CACHE = "layers-cache.json"
POLICY_CACHE = "policy-cache.json"  # policies of the last run (contrast.policy.cache)
SCHEMA_CACHE = "schema-cache.json"  # resources that passed (contrast.kuberesource.schemacache)
YAML_CACHE = "yaml-cache.txt"  # the documents of files read or written (kuberesource.yamlmemo)
EMULATED_TEE = "emulated-tee"
REFERENCE_VALUES = "reference-values.json"  # written by `contrast runtime build`
STDIN = Path("-")


def register(commands: Any) -> None:
    """Add `generate`; its options in groups, in the order `--help` lists them."""
    parser = commands.add_parser(
        "generate",
        help="make the pods in Kubernetes YAML confidential and write the manifest",
        description="Resolve runtime classes, inject the Initializer and service-mesh sidecar,"
        " derive a Kata agent policy per pod (its initdata goes into the pod annotation) and"
        " write manifest.json with the policies and the platforms' reference values. Files are"
        " rewritten in place; `-` reads YAML from stdin and writes it to stdout.",
    )
    _add_inputs(parser)
    _add_workspace_files(parser)
    _add_owners(parser)
    _add_injections(parser)
    _add_image_sources(parser)
    _add_trust_and_output(parser)
    parser.set_defaults(run=run_generate)


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    """What to make confidential: the YAML, the platform of plain `contrast-cc` pods, where."""
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="YAML file or dir")
    parser.add_argument(
        "--reference-values",
        metavar="PLATFORM",
        help="platform of pods with runtimeClassName contrast-cc (placeholders such as"
        " contrast-cc-metal-qemu-tdx name their own); one of: "
        + ", ".join(p.name for p in PLATFORMS),
    )
    parser.add_argument(
        "--workspace-dir",
        type=Path,
        default=Path("."),
        metavar="WORKSPACE",
        help="where the files below are, unless given as paths (default: .)",
    )


def _add_workspace_files(parser: argparse.ArgumentParser) -> None:
    """The policy inputs and the manifest, each defaulting to its file in the workspace."""
    parser.add_argument("-p", "--policy", type=Path, help=f"Rego rules (default: {RULES})")
    parser.add_argument("-s", "--settings", type=Path, help=f"policy settings ({SETTINGS})")
    parser.add_argument(
        "--layers-cache", type=Path, help=f"cache of image layer facts ({LAYERS_CACHE})"
    )
    parser.add_argument("-m", "--manifest", type=Path, help=f"the manifest ({MANIFEST})")


def _add_owners(parser: argparse.ArgumentParser) -> None:
    """Who may change the manifest and who recovers the seed: the manifest's owner fields."""
    parser.add_argument(
        "-w",
        "--add-workload-owner-key",
        type=Path,
        action="append",
        default=[],
        metavar="KEY",
        help=f"key allowed to update the manifest (default: {WORKLOAD_OWNER_KEY}, created if"
        " missing); repeatable",
    )
    parser.add_argument(
        "--add-seedshare-owner-key",
        type=Path,
        action="append",
        default=[],
        metavar="KEY",
        help=f"key that receives a seed share (default: {SEEDSHARE_OWNER_KEY}, created if"
        " missing); repeatable",
    )
    parser.add_argument(
        "--seedshare-threshold",
        type=int,
        default=1,
        metavar="K",
        help="how many seed share owners recover the seed together (Shamir K of N; default 1:"
        " each owner alone)",
    )
    parser.add_argument(
        "-d",
        "--disable-updates",
        action="store_true",
        help="list no workload owner: the manifest can never be changed (immutable deployment)",
    )


def _add_injections(parser: argparse.ArgumentParser) -> None:
    """The sidecars generate adds to every pod (and the insecure one it adds only when asked)."""
    parser.add_argument("--skip-initializer", action="store_true", help="inject no Initializer")
    parser.add_argument(
        "--skip-service-mesh", action="store_true", help="inject no service-mesh sidecar"
    )
    parser.add_argument(
        "--insecure-enable-debug-shell-access",
        action="store_true",
        help="INSECURE: add the contrast-debug-shell sidecar and contrast.insecure-debug to every"
        " pod's initdata (the policy hashes show it); never for production",
    )
    parser.add_argument(
        "--inject-image-store",
        action="store_true",
        help="add an ephemeral block volume at /dev/image_store (10Gi, or the pod's"
        " image-store-size) for the pod's images, instead of memory",
    )


def _add_image_sources(parser: argparse.ArgumentParser) -> None:
    """Where images come from: replacements, local OCI layouts and plain-HTTP registries."""
    add_image_replacements(parser)
    parser.add_argument(
        "--oci-layout",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="read images from this OCI image layout before asking registries (air-gapped)",
    )
    parser.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="reach this registry over plain HTTP",
    )


def _add_trust_and_output(parser: argparse.ArgumentParser) -> None:
    """The reference values the manifest trusts, and where the rewritten resources go."""
    parser.add_argument(
        "--emulated-tee",
        type=Path,
        metavar="DIR",
        help=f"state of the emulated TEE the emulated platforms trust (default: {EMULATED_TEE})",
    )
    parser.add_argument(
        "--reference-values-file",
        type=Path,
        metavar="FILE",
        help="reference values by runtime handler, as `contrast runtime build` writes them;"
        " pods of a platform named there get its runtime (default: reference-values.json in"
        " the workspace if it exists, else the ones built into this release)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, help="write all resources to this one file instead"
    )


def _workspace_values(workspace: Path) -> Path | None:
    """`reference-values.json` where `contrast runtime build` writes it, if it did."""
    path = workspace / REFERENCE_VALUES
    return path if path.is_file() else None


def _options(arguments: argparse.Namespace) -> pipeline.Options:
    workspace: Path = arguments.workspace_dir
    if arguments.disable_updates and arguments.add_workload_owner_key:
        raise UsageError("--disable-updates and --add-workload-owner-key exclude each other")
    owners = arguments.add_workload_owner_key or [workspace / WORKLOAD_OWNER_KEY]
    seedshares = arguments.add_seedshare_owner_key or [workspace / SEEDSHARE_OWNER_KEY]
    if arguments.disable_updates:
        owners = []
    if not 1 <= arguments.seedshare_threshold <= len(seedshares):
        raise UsageError(
            f"--seedshare-threshold {arguments.seedshare_threshold} needs as many seed share"
            f" owner keys, and there are {len(seedshares)}",
            hint="pass --add-seedshare-owner-key once per owner, at least K times",
        )
    platform = by_name(arguments.reference_values) if arguments.reference_values else None
    return pipeline.Options(
        paths=tuple(arguments.paths),
        rules=arguments.policy or workspace / RULES,
        settings=arguments.settings or workspace / SETTINGS,
        layers_cache=arguments.layers_cache or workspace / LAYERS_CACHE,
        policy_cache=workspace / POLICY_CACHE,
        schema_cache=workspace / SCHEMA_CACHE,
        yaml_cache=workspace / YAML_CACHE,
        manifest=arguments.manifest or workspace / MANIFEST,
        workload_owner_keys=tuple(owners),
        seedshare_owner_keys=tuple(seedshares),
        # Keys are created only at their default paths: a path the user names must exist.
        create_keys=(not arguments.add_workload_owner_key, not arguments.add_seedshare_owner_key),
        platform=platform,
        disable_updates=arguments.disable_updates,
        seedshare_threshold=arguments.seedshare_threshold,
        skip_initializer=arguments.skip_initializer,
        skip_service_mesh=arguments.skip_service_mesh,
        insecure_debug_shell=arguments.insecure_enable_debug_shell_access,
        inject_image_store=arguments.inject_image_store,
        image_replacements=image_replacements(arguments),
        oci_layouts=tuple(arguments.oci_layout),
        insecure_registries=tuple(arguments.insecure_registry),
        emulated_tee=arguments.emulated_tee or workspace / EMULATED_TEE,
        reference_values_file=arguments.reference_values_file or _workspace_values(workspace),
        output=arguments.output,
        progress=sys.stderr.isatty(),
    )


def run_generate(arguments: argparse.Namespace) -> int:
    options = _options(arguments)
    # With YAML on stdout, the report goes to stderr so that the output stays applicable.
    report = sys.stderr if STDIN in options.paths else sys.stdout
    result = pipeline.generate(options)
    for warning in result.warnings:
        print(f"warning: {warning.explain()}", file=sys.stderr)
    print(
        f"✔ {len(result.policies)} confidential workloads on {', '.join(result.platforms)}",
        file=report,
    )
    for path in result.written:
        if path != STDIN:
            print(f"  wrote {path}", file=report)
    if result.missing_reference_values:
        print(
            f"Fill in these reference values in {options.manifest} before `contrast set`:",
            file=report,
        )
        for note in result.missing_reference_values:
            print(f"  - {note}", file=report)
    return 0
