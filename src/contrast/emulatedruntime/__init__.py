"""The emulated confidential runtime: containerd's runtime handler for the emulated platforms.

It stands where Kata and a confidential VM stand on real hardware, and keeps their security
contract for each pod: every request the Kata agent would receive (`agentrequests`) is judged by
the pod's own policy with the engine of `contrast policy evaluate` before runc acts on it
(`wrapper`), and the pod gets an emulated TEE whose HOSTDATA / MRCONFIGID is its initdata's
digest, fixed by the node (`teeserver`), signed with roots the pod never sees (`roots`).

It is an OCI runtime around runc, plugged into containerd's own `io.containerd.runc.v2` shim as
its `BinaryName` (`launcher`): containerd, CRI and the shim stay the real ones, and only the runc
calls that are agent requests go through Python. What it cannot emulate: memory encryption,
measured boot and a guest kernel; it is for development and tests only.
"""
