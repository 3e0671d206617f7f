"""Evidence through configfs-tsm, the kernel's TEE-neutral report interface (Linux 6.7+).

Documentation/ABI/testing/configfs-tsm-report: every `mkdir` under `/sys/kernel/config/tsm/report`
creates a report entry with these attributes:

    provider     "sev_guest\\n" or "tdx_guest\\n": which driver answers
    generation   a counter the kernel bumps on every write to the entry
    inblob       64 bytes of REPORT_DATA (write)
    privlevel    SNP: the VMPL to report at, not below privlevel_floor (write, optional)
    outblob      the 1184-byte SNP report or the TDX quote (read; produced on first read)
    auxblob      SNP: the GHCB certificate table the host supplied, possibly empty (read)

The entry is shared state: another process that knows its name could write `inblob` between our
write and our read, and we would return a report over *its* data. As go-configfs-tsm does, the
generation is read after creating the entry, counted up for each of our writes, and compared after
every read; a mismatch starts over in a fresh entry. The entry is removed in every case, since
each one pins kernel memory.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.guest.reportdata import require_report_data
from contrast.attestation.tee import Tee

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/sys/kernel/config/tsm/report")
PROVIDERS = {"sev_guest": Tee.SNP, "tdx_guest": Tee.TDX}
ATTEMPTS = 3
ENTRY_PREFIX = "contrast-"


class ConfigfsFilesystem:
    """The file operations on configfs; tests replace it with a fake that acts like the kernel."""

    def make_entry(self, root: Path) -> Path:
        """Create a report entry with a name no other process can predict."""
        return Path(tempfile.mkdtemp(prefix=ENTRY_PREFIX, dir=root))

    def read(self, path: Path) -> bytes:
        return path.read_bytes()

    def write(self, path: Path, data: bytes) -> None:
        # One write(2) call: configfs binary attributes take the whole value at once.
        with path.open("wb", buffering=0) as file:
            file.write(data)

    def remove_entry(self, entry: Path) -> None:
        """rmdir: configfs removes the attributes with the entry."""
        entry.rmdir()


@dataclass(frozen=True)
class TsmReport:
    """What one configfs-tsm entry produced."""

    provider: str
    platform: Tee
    # The raw SNP report or TDX quote.
    outblob: bytes
    # SNP: the certificate table; None when the provider has none or the host supplied nothing.
    auxblob: bytes | None


class _GenerationMismatch(Exception):
    def __init__(self, attribute: str, expected: int, actual: int) -> None:
        super().__init__(attribute, expected, actual)
        self.attribute = attribute
        self.expected = expected
        self.actual = actual


def available(root: Path = DEFAULT_ROOT) -> bool:
    """Whether configfs-tsm is mounted at `root` (not yet whether a provider is registered)."""
    return root.is_dir()


def get_report(
    report_data: bytes,
    *,
    root: Path = DEFAULT_ROOT,
    privlevel: int | None = None,
    filesystem: ConfigfsFilesystem | None = None,
    attempts: int = ATTEMPTS,
) -> TsmReport:
    """A report over `report_data` (exactly 64 bytes) from whichever provider is registered.

    Raises EvidenceUnavailable with Reason.NO_TEE when no provider is registered, and with
    Reason.ISSUER_FAILED when the provider fails or a concurrent writer outlasts `attempts`.
    """
    report_data = require_report_data(report_data)
    filesystem = filesystem or ConfigfsFilesystem()
    mismatch: _GenerationMismatch | None = None
    for _ in range(attempts):
        try:
            return _get_report_once(filesystem, root, report_data, privlevel)
        except _GenerationMismatch as error:
            log.warning(
                "configfs-tsm: %s was read at generation %d, expected %d; retrying",
                error.attribute,
                error.actual,
                error.expected,
            )
            mismatch = error
    assert mismatch is not None
    raise EvidenceUnavailable(
        Reason.ISSUER_FAILED,
        f"configfs-tsm: another process kept writing to the report entry ({mismatch.attribute}"
        f" read at generation {mismatch.actual}, expected {mismatch.expected};"
        f" {attempts} attempts)",
        hint=f"find the process that writes to entries under {root}",
    )


def _get_report_once(
    filesystem: ConfigfsFilesystem, root: Path, report_data: bytes, privlevel: int | None
) -> TsmReport:
    try:
        entry = filesystem.make_entry(root)
    except OSError as error:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"cannot create a configfs-tsm report entry in {root}: {error.strerror or error}",
            hint="creating report entries needs root",
        ) from None
    try:
        provider = _read_provider(filesystem, entry)
        expected = _read_generation(filesystem, entry)
        _write(filesystem, entry, "inblob", report_data)
        expected += 1
        if privlevel is not None:
            _write(filesystem, entry, "privlevel", str(privlevel).encode())
            expected += 1
        outblob = _read_checked(filesystem, entry, "outblob", expected, provider)
        if not outblob:
            raise EvidenceUnavailable(
                Reason.ISSUER_FAILED, f"configfs-tsm ({provider}) returned an empty report"
            )
        auxblob = _read_checked(filesystem, entry, "auxblob", expected, provider, optional=True)
        return TsmReport(provider, PROVIDERS[provider], outblob, auxblob or None)
    finally:
        try:
            filesystem.remove_entry(entry)
        except OSError as error:
            log.warning("configfs-tsm: could not remove the report entry %s: %s", entry, error)


def _read_provider(filesystem: ConfigfsFilesystem, entry: Path) -> str:
    try:
        provider = filesystem.read(entry / "provider").decode(errors="replace").strip()
    except OSError:
        # The kernel answers ENXIO when no TEE driver registered itself.
        provider = ""
    if not provider:
        raise EvidenceUnavailable(
            Reason.NO_TEE,
            f"configfs-tsm at {entry.parent} has no provider: no TEE guest driver is registered",
            hint="load the sev-guest or tdx-guest kernel module inside a confidential VM",
        )
    if provider not in PROVIDERS:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"configfs-tsm provider {provider!r} is not supported"
            f" (supported: {', '.join(sorted(PROVIDERS))})",
        )
    return provider


def _read_generation(filesystem: ConfigfsFilesystem, entry: Path) -> int:
    try:
        text = filesystem.read(entry / "generation").decode(errors="replace")
        return int(text.strip())
    except (OSError, ValueError) as error:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED, f"configfs-tsm: cannot read {entry / 'generation'}: {error}"
        ) from None


def _write(filesystem: ConfigfsFilesystem, entry: Path, attribute: str, data: bytes) -> None:
    try:
        filesystem.write(entry / attribute, data)
    except OSError as error:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"configfs-tsm: writing {attribute} failed: {error.strerror or error}",
            hint="privlevel must not be below privlevel_floor"
            if attribute == "privlevel"
            else None,
        ) from None


def _read_checked(
    filesystem: ConfigfsFilesystem,
    entry: Path,
    attribute: str,
    expected: int,
    provider: str,
    *,
    optional: bool = False,
) -> bytes | None:
    """Read an attribute, then make sure nobody wrote to the entry since our last write."""
    try:
        data = filesystem.read(entry / attribute)
    except FileNotFoundError:
        if optional:
            return None
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED, f"configfs-tsm ({provider}) has no {attribute} attribute"
        ) from None
    except OSError as error:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"configfs-tsm ({provider}) could not produce {attribute}: {error.strerror or error}",
            hint="check the guest kernel log (dmesg); for TDX the host's quote service must run",
        ) from None
    actual = _read_generation(filesystem, entry)
    if actual != expected:
        raise _GenerationMismatch(attribute, expected, actual)
    return data
