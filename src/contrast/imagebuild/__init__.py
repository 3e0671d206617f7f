"""The release images, built reproducibly: `contrast-build-images --output DIR`.

Four images (Coordinator, Initializer, service-mesh proxy, node installer) share one minimal
Debian root file system made by `mmdebstrap` from packages pinned by version, the project's own
wheel and its dependencies' wheels pinned by sha256 (`images/lock.json`). Every layer is a tar
written here with sorted entries, fixed times and owners, so the same inputs give the same
digests; the result is one OCI image layout that `skopeo` can push and containerd can run.
"""
