"""`contrast initializer` as a `secure-pv` pod runs it, inside the KVM guest.

Run by the guest's `/init` with the image's interpreter, against the image's own `contrast`
package, through the program's `main` with the arguments and environment `generate` gives the
injected container (`contrast initializer`; `COORDINATOR_HOST`, `CRYPTSETUP_DEVICE=/dev/csi0`;
the volume at `/state`; the files under `/contrast`). The one thing the guest cannot do is ask a
Coordinator: `obtain_mesh_certificate` returns the answer the test brought in (the workload secret
the Coordinator derives for the pod's workload-secret-id; placeholder certificates, which
secure-pv does not read), and there is no TEE to issue evidence. From there on it is the
Initializer's own code: the files written to `/contrast` (the secret as the hex key file), then
`cryptsetup.serve` on the device until SIGTERM, a failure as the program's one line on stderr.
This file runs only in the guest; it is not imported by the tests.
"""

import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from contrast.cli import components
from contrast.cli.main import main
from contrast.initializer.files import WorkloadFiles

ANSWER = json.loads(Path("/kvmguest/answer.json").read_text())


def obtain_mesh_certificate(target: str, issuer: Any, *, deadline: float | None) -> WorkloadFiles:
    return WorkloadFiles(
        mesh_ca=b"",
        cert_chain=b"",
        root_ca=b"",
        key=ec.generate_private_key(ec.SECP256R1()),
        workload_secret=bytes.fromhex(ANSWER["workload_secret"]),
    )


components.obtain_mesh_certificate = obtain_mesh_certificate
components._issuer = lambda arguments: None
sys.exit(main(["initializer"]))
