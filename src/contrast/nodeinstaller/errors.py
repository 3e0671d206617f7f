"""Everything the node installer refuses, as one family under `ContrastError`."""

from __future__ import annotations

from contrast.errors import ContrastError


class NodeInstallerError(ContrastError):
    """The runtime could not be installed; the message names the file or setting at fault."""


class ArtefactError(NodeInstallerError):
    """An artefact is missing or differs from the digest or size the description names."""


class TargetConfigError(NodeInstallerError):
    """The target config (the node's containerd and systemd layout) is unreadable or invalid."""


class ContainerdConfigError(NodeInstallerError):
    """containerd's config cannot be read or cannot take the runtime without losing content."""


class RestartError(NodeInstallerError):
    """containerd could not be restarted; its config is written but not yet in effect."""
