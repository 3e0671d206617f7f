"""Where a pod of the emulated runtime finds its TEE: the socket's directory in every container.

Apart from `endpoint` (which needs protobuf) so that the runtime's `runc create` path, which
only mounts the directory, starts without loading it.
"""

CONTAINER_DIRECTORY = "/run/contrast-tee"
SOCKET_NAME = "tee.sock"
DEFAULT_SOCKET = f"{CONTAINER_DIRECTORY}/{SOCKET_NAME}"
SOCKET_ENV = "CONTRAST_TEE_SOCKET"
