#!/usr/bin/env bash
# Installs the Debian packages the tests run for real: openssl (`verify` checks the mesh certificate
# chains), docker-registry (images for `generate`), containerd and runc (check the configs the node
# installer writes, and run the release images), cryptsetup-bin (veritysetup, and cryptsetup for the
# encrypted volume's tests), mmdebstrap (builds the
# images' root file system), skopeo (pushes them to the registry), umoci (reads our OCI layout as a
# second, independent implementation); for the test cluster (scripts/cluster.sh): the CNI plugins,
# iptables (kube-proxy), curl, and busybox-static (the userland of its smoke test's pod image); for
# the emulated runtime's tests, iproute2 (a pod's network namespace); qemu-system-x86 (the KVM guest
# with a Debian kernel that opens the encrypted volume, tests/kvmguest). Only missing commands are
# installed; needs root for apt-get.
set -euo pipefail
declare -A packages=(
    [openssl]=openssl
    [docker-registry]=docker-registry
    [containerd]=containerd
    [veritysetup]=cryptsetup-bin
    [cryptsetup]=cryptsetup-bin
    [runc]=runc
    [mmdebstrap]=mmdebstrap
    [skopeo]=skopeo
    [umoci]=umoci
    [/usr/lib/cni/bridge]=containernetworking-plugins
    [iptables]=iptables
    [curl]=curl
    [busybox]=busybox-static
    [ip]=iproute2
    [qemu-system-x86_64]=qemu-system-x86
)
missing=()
for command in "${!packages[@]}"; do
    command -v "$command" >/dev/null || missing+=("${packages[$command]}")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]} (run this script as root)" >&2
    exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
