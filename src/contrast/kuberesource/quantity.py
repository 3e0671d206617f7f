"""Kubernetes resource quantities (`128Mi`, `1G`, `1e9`, `500m`) as exact numbers.

The memory checks add up container limits and compare them with image sizes; a float would
turn `0.1Gi` into a number of bytes Kubernetes never means.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from contrast.kuberesource.workloads import ResourceError

MIB = 1024 * 1024
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>[a-zA-Z]*))$"
)


class QuantityError(ResourceError):
    """A resource quantity Kubernetes would not accept."""


def parse_quantity(value: object, where: str = "") -> Decimal:
    """The quantity's value in base units (bytes for memory, cores for CPU)."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    suffix = match.group("suffix") if match else None
    if match is None or (suffix is not None and suffix not in _SUFFIXES):
        prefix = f"{where}: " if where else ""
        raise QuantityError(
            f"{prefix}{text!r} is not a Kubernetes quantity",
            hint="write e.g. 128Mi, 1Gi or 500M",
        )
    try:
        number = Decimal(match.group("number"))
        if match.group("exponent"):
            return number * Decimal(10) ** int(match.group("exponent")[1:])
    except (InvalidOperation, ValueError) as error:  # pragma: no cover - the pattern rules it out
        raise QuantityError(f"{text!r} is not a number") from error
    return number * _SUFFIXES[suffix or ""]


def mebibytes(value: Decimal) -> int:
    """Bytes to MiB, rounded up: a VM never gets less than was asked for."""
    whole, rest = divmod(value, MIB)
    return int(whole) + (1 if rest > 0 else 0)
