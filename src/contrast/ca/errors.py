"""The ca package's errors: its root, under the project's, and a sealed CA that cannot be trusted.

The sealed CA is stored in the history, but whether it opens is the CA's business: the history
package's errors say what its own store found, and the Coordinator maps this one to the same
"stored state damaged" answer.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class AuthorityError(ContrastError):
    """The root of the ca package's errors."""


class SealedAuthorityDamaged(AuthorityError):
    """A sealed CA that was altered, moved from another state, or sealed by another seed."""
