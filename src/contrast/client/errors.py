"""The root of everything `client` refuses, under `ContrastError` like every package's.

The CLI prints any of them as one line; a caller that wants to tell the client's refusals from
the Coordinator's own (`coordinator.errors`) or a workspace file's catches `ClientError`.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class ClientError(ContrastError):
    """A client operation (set, verify, recover) could not be done; the message says why."""
