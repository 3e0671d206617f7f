"""Kata Containers static releases: from `kata-static-<version>-amd64.tar.*` to a Contrast runtime.

The Confidential Containers project publishes the Kata shim, QEMU with SNP/TDX support, the
confidential guest kernel and image, OVMF and TDVF and their configuration TOMLs as one tarball.
`archive` opens it (or its unpacked tree), `layout` holds the packaging facts (where each file
lives), `config` reads and renders the platform's Kata configuration, `cmdline` predicts the guest
kernel command line that configuration yields, and `build` turns all of it into a node-installer
payload, the runtime's Kubernetes resources and its reference values.

Every packaging fact was read in kata-containers/kata-containers at commit
7c6ba40c54ea29b459b4997cff948caaba4e658b (`layout.KATA_SOURCE_COMMIT`).
"""
