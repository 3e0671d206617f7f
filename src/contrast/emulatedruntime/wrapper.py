"""The runc calls that are Kata agent requests: checked against the pod's policy, then runc.

`create` of a pod's sandbox (pause) container is CreateSandbox and CreateContainer: the pod's
initdata (the `io.katacontainers.config.hypervisor.cc_init_data` annotation CRI copies into the
sandbox's spec through `pod_annotations`) is fixed for the pod, its policy judges both requests,
and the pod's emulated TEE is started with that initdata. `create` of any other container is
CreateContainer under the same policy, with the state its earlier answers built. `exec` is
ExecProcess, then the stream requests its stdio would make (`_withhold_streams`). `delete` is
RemoveContainer (and, for the sandbox, the end of its TEE). Creating a sandbox also reaps
those whose shim is gone without a delete (`reaper`). `update`, `pause` and `resume` are
UpdateContainer, PauseContainer and ResumeContainer. A refusal is runc failing: exit status 1,
the policy's reason on stderr and in runc's log, which is what containerd reports ("failed to
create task: … CreateContainerRequest is blocked by policy: …").

Before runc creates a container its spec gets one mount more, the directory of the pod's TEE
socket at `CONTAINER_DIRECTORY` (read-only): the pod's only way to its TEE.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from contrast.attestation.emulated.socketpath import CONTAINER_DIRECTORY
from contrast.emulatedruntime import agentrequests, evaluator, runccli
from contrast.emulatedruntime.node import (
    EmulatedRuntimeError,
    NodeSettings,
    NodeState,
    Owner,
    Sandbox,
    checked_id,
)
from contrast.errors import ContrastError
from contrast.files import write_atomically
from contrast.policy import initdata
from contrast.policy.engine import Decision

if TYPE_CHECKING:
    from contrast.policy.engine import AgentPolicy

INITDATA_ANNOTATION = initdata.ANNOTATION
CONTAINER_NAME = "io.kubernetes.cri.container-name"
# runc commands that are agent requests about one container, judged on its id alone (CRI's
# UpdateContainerResources; pausing): Kata's rules refuse all three.
_CONTAINER_REQUESTS = {
    "update": "UpdateContainerRequest",
    "pause": "PauseContainerRequest",
    "resume": "ResumeContainerRequest",
}
_PRINT_LOCATION = re.compile(r"^agent_policy:\d+:\s*")


class PolicyRefusal(EmulatedRuntimeError):
    """A request the pod's policy denies: the message is the agent's."""


def run(argv: Sequence[str], settings: NodeSettings) -> int:
    """Handle one runc call (argv without the program name); returns only on refusal."""
    call = runccli.parse(argv)
    try:
        if call.command == "create":
            _create(call, settings)
        elif call.command == "exec":
            _exec(call, settings)
        elif call.command == "delete":
            return _delete(call, argv, settings)
        elif call.command in _CONTAINER_REQUESTS:
            _container_request(call, settings, _CONTAINER_REQUESTS[call.command])
    except ContrastError as error:
        _report(call, error)
        return 1
    except (OSError, ValueError) as error:
        # An unreadable bundle or process file, a spec that is not JSON: one line, not a trace.
        _report(call, EmulatedRuntimeError(f"emulated runtime: {call.command}: {error}"))
        return 1
    return _exec_runc(settings, argv)


def _exec_runc(settings: NodeSettings, argv: Sequence[str]) -> NoReturn:
    os.execv(settings.runc, [settings.runc, *argv])  # noqa: S606


def _report(call: runccli.RuncCall, error: ContrastError) -> None:
    """Tell containerd why: as runc's last error in its log file, then on stderr.

    The log first: for a sandbox the shim has closed runc's stderr, and the kubelet's event takes
    the reason from the log ("unable to retrieve OCI runtime error" when there is none).
    """
    message = str(error)
    if call.log:
        from datetime import UTC, datetime  # noqa: PLC0415 (only when refusing)

        line = (
            json.dumps({"level": "error", "msg": message, "time": datetime.now(UTC).isoformat()})
            if call.log_format == "json"
            else f"ERRO {message}"
        )
        try:
            with open(call.log, "a") as log:
                log.write(line + "\n")
        except OSError:
            pass
    if sys.stderr is None:  # fd 2 was closed when Python started
        return
    # stderr's reader may be gone (a sandbox's create): the log has the reason then.
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


def _load_policy(toml: bytes, state: Mapping[str, Any]) -> AgentPolicy:
    from contrast.policy.engine import AgentPolicy  # noqa: PLC0415 (regorus: only when needed)

    document = initdata.Initdata.from_toml(toml)
    if document.policy is None:
        raise EmulatedRuntimeError("the pod's initdata has no policy.rego")
    return AgentPolicy(document.policy, state.get("data"))


def _evaluate(
    sandbox: Sandbox, state: Mapping[str, Any], kind: str, request: Mapping[str, Any]
) -> tuple[Decision, dict[str, Any]]:
    """The decision on `request` with the pod's policy state, and the state after it.

    Asked of the pod's TEE server, which keeps the policy compiled (`evaluator`); evaluated
    here, loading the policy, when it does not answer. Call under the sandbox's lock.
    """
    answer = evaluator.ask(sandbox.directory, state.get("data"), kind, request)
    if answer is not None:
        allowed, name, prints, data = answer
        return Decision(name, allowed, prints), data
    policy = _load_policy(sandbox.initdata(), state)
    decision = policy.evaluate(kind, request)
    return decision, policy.data


def refusal_message(decision: Decision, container_name: str | None = None) -> str:
    """The agent's denial, led by what concerns the container at hand.

    Kata's rules print every policy container's failed checks; the agent joins them all. A pod
    event shows only the start of a long message, so the lines of the policy container that
    bears the request's own container name come first (with the rule's check name, what the
    policy expects and what was sent), without regorus's `agent_policy:<line>:` locations.
    """
    lines = [_PRINT_LOCATION.sub("", line).strip() for line in decision.prints]
    if container_name:
        own = [line for line in lines if f" {container_name} - " in line]
        if own:
            lines = own + [line for line in lines if line not in own]
    return f"{decision.kind} is blocked by policy: " + "; ".join(lines)


def _require(decision: Decision, container_name: str | None = None) -> None:
    if not decision.allowed:
        raise PolicyRefusal(refusal_message(decision, container_name))


def _create(call: runccli.RuncCall, settings: NodeSettings) -> None:
    container_id = checked_id(call.container_id, "container id")
    bundle = Path(call.option("--bundle", "-b") or os.getcwd())
    config = bundle / "config.json"
    spec = json.loads(config.read_text())
    sandbox_id = agentrequests.sandbox_id(spec, container_id)
    node = NodeState(settings.state)
    if agentrequests.container_type(spec) == "sandbox":
        sandbox = _create_sandbox(node, spec, container_id, bundle, settings)
    else:
        sandbox = node.sandbox(sandbox_id)
        toml = sandbox.initdata()
        own = spec.get("annotations", {}).get(INITDATA_ANNOTATION)
        if own is not None and initdata.decode_annotation(own) != toml:
            raise EmulatedRuntimeError(
                f"container {container_id} carries another initdata than its sandbox {sandbox_id}"
            )
        with sandbox.locked():
            state = sandbox.load_state()
            devices: dict[str, int] = dict(state.get("devices") or {})

            def device_number(volume: str) -> int:
                return devices.setdefault(volume, len(devices) + 1)

            request = agentrequests.create_container_request(
                spec, container_id, bundle=str(bundle), device_number=device_number
            )
            name = spec.get("annotations", {}).get(CONTAINER_NAME)
            decision, data = _evaluate(sandbox, state, "CreateContainerRequest", request)
            _require(decision, name)
            sandbox.save_state({**state, "data": data, "devices": devices})
            if sandbox.server_pid() is None:
                # The pod's TEE died (killed, OOM): its next container brings it back, with the
                # initdata fixed at the sandbox's creation.
                from contrast.emulatedruntime import teeserver  # noqa: PLC0415

                teeserver.start(sandbox, settings)
    node.record_container(container_id, sandbox.id)
    _add_tee_mount(config, spec, sandbox)


def _create_sandbox(
    node: NodeState,
    spec: Mapping[str, Any],
    container_id: str,
    bundle: Path,
    settings: NodeSettings,
) -> Sandbox:
    annotation = spec.get("annotations", {}).get(INITDATA_ANNOTATION)
    if not isinstance(annotation, str):
        raise EmulatedRuntimeError(
            f"pod sandbox {container_id} has no {INITDATA_ANNOTATION} annotation",
            hint="run `contrast generate` on the pod; the runtime runs only pods with a policy"
            " (and containerd must pass io.katacontainers.* pod annotations)",
        )
    toml = initdata.decode_annotation(annotation)
    policy = _load_policy(toml, {})
    _require(policy.evaluate("CreateSandboxRequest",
                             agentrequests.create_sandbox_request(spec, container_id)))  # fmt: skip
    request = agentrequests.create_container_request(spec, container_id, bundle=str(bundle))
    _require(policy.evaluate("CreateContainerRequest", request))
    # The sandbox's owner is the shim that runs this create (the launcher execs into Python):
    # it lives as long as the pod, and its end without a delete makes the sandbox an orphan.
    owner = Owner.of(os.getppid())
    if owner is None:
        raise EmulatedRuntimeError(f"the caller of runc create {container_id} is gone")
    sandbox = node.new_sandbox(container_id, toml, owner)
    with sandbox.locked():
        sandbox.save_state({"data": policy.data, "devices": {}})
    from contrast.emulatedruntime import reaper, teeserver  # noqa: PLC0415 (only for sandboxes)

    teeserver.start(sandbox, settings)
    # A node gains a sandbox here: the moment to end those whose shim died without a delete.
    # Never a reason to refuse this pod.
    with contextlib.suppress(OSError, ContrastError):
        reaper.reap(node, keep=sandbox.id)
    return sandbox


def _add_tee_mount(config: Path, spec: Mapping[str, Any], sandbox: Sandbox) -> None:
    mounts = [m for m in spec.get("mounts", []) if m.get("destination") != CONTAINER_DIRECTORY]
    mounts.append(
        {
            "destination": CONTAINER_DIRECTORY,
            "type": "bind",
            "source": str(sandbox.tee_directory),
            "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
        }
    )
    updated = {**spec, "mounts": mounts}
    write_atomically(config, json.dumps(updated).encode(), mode=config.stat().st_mode & 0o777)


def _exec(call: runccli.RuncCall, settings: NodeSettings) -> None:
    container_id = checked_id(call.container_id, "container id")
    sandbox = NodeState(settings.state).sandbox_of(container_id)
    if sandbox is None:
        raise EmulatedRuntimeError(f"container {container_id} was not created by this runtime")
    process_file = call.option("--process", "-p")
    if process_file is None:
        raise EmulatedRuntimeError(
            "exec without --process is not supported by the emulated runtime"
        )
    process = json.loads(Path(process_file).read_text())
    import uuid  # noqa: PLC0415 (exec only; the create path starts without it)

    exec_id = uuid.uuid4().hex
    request = agentrequests.exec_process_request(process, container_id, exec_id)
    with sandbox.locked():
        state = sandbox.load_state()
        decision, _ = _evaluate(sandbox, state, "ExecProcessRequest", request)
        _require(decision)
        if process.get("terminal"):
            return  # the terminal is runc's, handed to the shim: see _withhold_streams
        refused = [
            kind
            for kind in _stream_requests()
            if not _evaluate(sandbox, state, kind, {"container_id": container_id,
                                                    "exec_id": exec_id})[0].allowed
        ]  # fmt: skip
    _withhold_streams(refused)


def _stream_requests() -> list[str]:
    """The stream requests a non-terminal exec would make: stdin only when it has one."""
    kinds = ["ReadStreamRequest"]
    try:
        if not _is_null_device(os.fstat(0)):
            kinds.append("WriteStreamRequest")
    except OSError:  # no fd 0: no stdin
        pass
    return kinds


def _is_null_device(status: os.stat_result) -> bool:
    null = os.stat(os.devnull)
    return stat.S_ISCHR(status.st_mode) and status.st_rdev == null.st_rdev


def _withhold_streams(refused: Sequence[str]) -> None:
    """Kata's agent answers the shim's ReadStdout/ReadStderr and WriteStdin only if the policy
    allows ReadStreamRequest and WriteStreamRequest: refused, the exec runs with no output seen
    and no input reaching it (the original's how-to: "without this, kubectl exec produces no
    output", "every keystroke is dropped"). runc gives a non-terminal exec its own stdio, so the
    refused ones become /dev/null before runc is started: output is discarded, and input is an
    empty stream, at its end at once (under Kata it stays open: CloseStdinRequest is refused by
    default too). A terminal (`kubectl exec -t`) is a pty runc creates and sends to the shim;
    its streams are not withheld here, nor a container's own (create: `kubectl logs`, `attach`).
    Judging them costs ~2.2 ms of CPU per stream request (the pod's server, a 63 KB policy).
    """
    if not refused:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        if "WriteStreamRequest" in refused:
            os.dup2(null, 0)
        if "ReadStreamRequest" in refused:
            os.dup2(null, 1)
            os.dup2(null, 2)
    finally:
        if null > 2:
            os.close(null)


def _container_request(call: runccli.RuncCall, settings: NodeSettings, kind: str) -> None:
    container_id = checked_id(call.container_id, "container id")
    sandbox = NodeState(settings.state).sandbox_of(container_id)
    if sandbox is None:
        raise EmulatedRuntimeError(f"container {container_id} was not created by this runtime")
    with sandbox.locked():
        decision, _ = _evaluate(sandbox, sandbox.load_state(), kind, {"container_id": container_id})
    _require(decision)


def _delete(call: runccli.RuncCall, argv: Sequence[str], settings: NodeSettings) -> int:
    """runc delete, then RemoveContainer (and the sandbox's TEE once its pause is gone)."""
    import subprocess  # noqa: PLC0415 (delete alone runs runc as a child; the rest exec it)

    code = subprocess.run([settings.runc, *argv], check=False).returncode  # noqa: S603
    if code != 0:
        return code
    node = NodeState(settings.state)
    container_id = checked_id(call.container_id, "container id")
    sandbox = node.sandbox_of(container_id)
    if sandbox is None:
        return 0
    if sandbox.id == container_id:
        from contrast.emulatedruntime import teeserver  # noqa: PLC0415 (only for sandboxes)

        teeserver.stop(sandbox)
        shutil.rmtree(sandbox.directory, ignore_errors=True)
    elif sandbox.exists():
        with sandbox.locked():
            state = sandbox.load_state()
            request = {"container_id": container_id}
            decision, data = _evaluate(sandbox, state, "RemoveContainerRequest", request)
            if decision.allowed:
                sandbox.save_state({**state, "data": data})
    node.forget_container(container_id)
    return 0
