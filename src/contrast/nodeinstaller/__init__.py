"""The node installer: puts a platform's runtime into a node's root and tells containerd about it.

The runtime it installs is described by `contrast.runtimedescription` (what a runtime consists
of, and the handler that names it by its content); `artefacts` checks the files against that
description, `kataconfig` and `containerdconfig` render and patch the two configuration files (a
runtime built from a Kata release by `contrast.kata.build` brings its own Kata configuration, with
`@@runtimeName@@` for the handler; the stand-ins get one rendered here), `restart` restarts
containerd, and `install` runs these steps in an order that leaves the host either untouched or
consistently updated. `hostroot` finds every node path inside the host root as the node would
(its symlinks included), and `tomldepth` bounds the nesting of the TOML that is read
(containerd's config here, Kata's in `contrast.kata.config`) before parsing it. The modules import
from the rest of Contrast `errors`, `files`, `attestation` (the `Tee` enum), `platforms`,
`runtimedescription` and, for the emulated platforms only, `emulatedruntime`.
"""
