"""The cli package's errors: its root, under the project's, and the kinds its commands raise.

The commands' own checks (options that do not fit together, a value of the wrong form, a port
the Coordinator cannot listen on) raise these, not another package's errors nor the bare
`ContrastError`, so that a caller of a command's function can tell what it refused from what a
package under it did. `main` prints every one of them as the same one line.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class CliError(ContrastError):
    """The root of the cli package's errors: a command that cannot do what it was asked."""


class UsageError(CliError):
    """Options that exclude each other, or an option's value that is not of its form."""


class CannotListen(CliError):
    """A port the command was to serve on is taken or not allowed."""
