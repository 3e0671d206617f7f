"""Where descriptions come from: shipped with this release, or in a built runtime's payload."""

from __future__ import annotations

import functools
from pathlib import Path

from contrast.runtimedescription.errors import RuntimeDescriptionError
from contrast.runtimedescription.model import PAYLOAD_DESCRIPTION, RuntimeDescription, parse_runtime

# The committed descriptions (`python -m contrast.nodeinstaller.standins` rewrites them).
SHIPPED_FOLDER = Path(__file__).with_name("runtimes")


@functools.cache
def load_runtime(platform_name: str) -> RuntimeDescription:
    """The shipped runtime description of a platform (by its lower-case name)."""
    entry = SHIPPED_FOLDER / f"{platform_name}.json"
    if not entry.is_file():
        raise RuntimeDescriptionError(
            f"no runtime description for platform {platform_name!r}",
            hint="this is a packaging error: runtimes/<platform>.json must ship with Contrast",
        )
    description = parse_runtime(entry.read_bytes(), source=f"runtimes/{platform_name}.json")
    if description.platform != platform_name:
        raise RuntimeDescriptionError(
            f"runtimes/{platform_name}.json describes platform {description.platform!r}"
        )
    return description


def load_payload(directory: Path) -> RuntimeDescription:
    """The description of a built runtime's payload: `runtime.json` beside its artefacts."""
    path = directory / PAYLOAD_DESCRIPTION
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RuntimeDescriptionError(
            f"payload {directory} has no readable {PAYLOAD_DESCRIPTION}: {error.strerror or error}",
            hint="pass the directory `contrast runtime build` wrote (runtimes/<handler>)",
        ) from None
    return parse_runtime(data, source=str(path))
