"""Evaluating agent requests against a policy exactly as the Kata agent does.

The agent (src/agent/policy/src/policy.rs; research/kata-agent-policy-inputs.md §1) builds one
regorus engine per policy: prints gathered, length limits of 64 KiB per line, 16 MiB per file and
200 000 lines, data `{"pstate": {}}`, the policy as module `agent_policy`, and then it reads
`data.agent_policy.AllowRequestsFailingPolicy` once. Each request queries
`data.agent_policy.<name>` with the request's serde JSON as input; the answer must be exactly one
value, a bool or `{"allowed": bool, "ops": <RFC 6902 patch>}`, and an allowed answer's patch is
applied to the whole data document. That is how Kata's rules keep state (`data.pstate`) across
requests, and why `AgentPolicy` keeps its state for the life of the object.

Two differences from the agent's engine are handled here:
- The agent runs regorus with strict builtin errors off, so a failing builtin makes only its
  expression undefined. The Python wheel has no such switch and raises. The agent's policies hit
  this in one place, `to_number` on a string that is not a number (Kata's IPv4 check on service-link
  env values such as `tcp://10.0.0.1:443`), so calls to `to_number` are guarded (see
  `lenient_policy_text`). Any other failing builtin still raises `PolicyEvaluationError`, where the
  agent would treat that expression as undefined.
- The agent's regorus has fewer builtins (no time, crypto, glob, …); a policy using those loads
  here but not in the guest. That is not checked.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from contrast.policy.errors import PolicyError
from contrast.policy.json_patch import JsonPatchError, apply_patch, is_operation
from contrast.policy.requests import normalise_request, query_name

PACKAGE = "agent_policy"
MODULE = "agent_policy"
INITIAL_DATA: Mapping[str, Any] = {"pstate": {}}
MAX_LINE_LENGTH = 64 * 1024
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_LINES = 200_000
ALLOW_FAILURES_RULE = "AllowRequestsFailingPolicy"

# `to_number(` is rewritten to a helper of the same length so every line keeps its length (the
# agent's limits apply to the text as written) and every error location stays exact.
LENIENT_TO_NUMBER = "ctr_tonum"
_LENIENT_MODULE_NAME = "contrast-lenient-builtins.rego"
_TO_NUMBER_DEFINED = "contrast.to_number_defined"
_LENIENT_MODULE = f"""package {PACKAGE}

{LENIENT_TO_NUMBER}(x) := to_number(x) if {_TO_NUMBER_DEFINED}(x)
"""
# Strings, raw strings and comments are copied as they are; only real calls are rewritten.
_REGO_TOKENS = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\\n])*")
      |(?P<raw>`[^`]*`)
      |(?P<comment>\#[^\n]*)
      |(?P<call>(?<![\w.])to_number(?=\s*\())""",
    re.VERBOSE,
)
_ERROR_LOCATION = re.compile(r"^\s*-->\s*(\S+)\s*$", re.MULTILINE)
_ERROR_TEXT = re.compile(r"^error:\s*(.*)$", re.MULTILINE)


class PolicyLoadError(PolicyError):
    """A policy the agent would refuse to load."""


class PolicyEvaluationError(PolicyError):
    """A request the agent would fail with an internal error (neither allowed nor denied)."""


@dataclass(frozen=True)
class Decision:
    """The agent's verdict on one request, and what it did to the policy state.

    `value` is the rule's raw answer (None when there was no result); `ops` the patch that was
    applied (empty for denials, which never change state); `overridden` is true when
    `AllowRequestsFailingPolicy` turned a denial or a missing result into "allow".
    """

    kind: str
    allowed: bool
    prints: tuple[str, ...] = ()
    ops: tuple[Mapping[str, Any], ...] = ()
    value: Any = None
    input: Mapping[str, Any] = field(default_factory=dict)
    overridden: bool = False

    @property
    def reason(self) -> str:
        """The first gathered print (Kata-style rules print the failing check), or ""."""
        return self.prints[0] if self.prints else ""

    @property
    def agent_message(self) -> str:
        """What the shim would be told on a denial (prints joined by spaces, as the agent does)."""
        return f"{self.kind} is blocked by policy: {' '.join(self.prints)}"


class AgentPolicy:
    """One policy loaded like the agent loads it, with the state its answers build up."""

    def __init__(self, text: str, data: Mapping[str, Any] | None = None) -> None:
        """Load `text`; `data` is a data document an earlier instance built (its `data`), for
        callers that evaluate one pod's requests in separate processes (the emulated runtime)."""
        self.text = text
        self._engine = _engine()
        self._engine.set_gather_prints(True)
        self._engine.add_extension(_TO_NUMBER_DEFINED, 1, _to_number_defined)
        self._data: dict[str, Any] = {}
        _add_policy(self._engine, MODULE, lenient_policy_text(text), "the policy")
        self._engine.add_policy(_LENIENT_MODULE_NAME, _LENIENT_MODULE)
        self.allows_failing_requests = False
        self.replace_data(data)

    def replace_data(self, data: Mapping[str, Any] | None) -> None:
        """Make the data document a copy of `data` (the initial one if None) and read
        `AllowRequestsFailingPolicy` again with it, as loading does: the policy then answers as
        `AgentPolicy(self.text, data)` would, without compiling it again (the emulated runtime's
        TEE server keeps one compiled policy and sets each call's state with this)."""
        self._data = copy.deepcopy(dict(INITIAL_DATA if data is None else data))
        self._engine.clear_data()
        self._engine.add_data(copy.deepcopy(self._data))
        self.allows_failing_requests = self._read_allow_failures()

    @property
    def state(self) -> dict[str, Any]:
        """A copy of `data.pstate`, the state the policy's ops have built up."""
        pstate = self._data.get("pstate", {})
        return copy.deepcopy(pstate) if isinstance(pstate, dict) else {}

    @property
    def data(self) -> dict[str, Any]:
        """A copy of the whole data document (`{"pstate": …}` unless ops added more)."""
        return copy.deepcopy(self._data)

    def query(self, rule: str, input_document: Mapping[str, Any] | None = None) -> Any:
        """`data.agent_policy.<rule>` (None if undefined), e.g. to read `policy_data`."""
        results = self._eval(rule, dict(input_document or {}))
        self._engine.take_prints()
        if len(results) != 1 or len(results[0].get("expressions", [])) != 1:
            return None
        return results[0]["expressions"][0].get("value")

    def evaluate(self, kind: str, request: Mapping[str, Any]) -> Decision:
        """Normalise `request`, query `data.agent_policy.<kind>` and apply the answer's ops."""
        name = query_name(kind)
        document = normalise_request(name, request)
        return self._decide(name, document, self.allows_failing_requests)

    def _read_allow_failures(self) -> bool:
        # The agent asks with allow_failures still false and treats any error as false.
        try:
            decision = self._decide(ALLOW_FAILURES_RULE, {}, allow_failures=False)
        except PolicyEvaluationError:
            return False
        return decision.allowed

    def _decide(self, name: str, document: dict[str, Any], allow_failures: bool) -> Decision:
        results = self._eval(name, document)
        prints = tuple(str(line) for line in self._engine.take_prints())
        if len(results) != 1:
            if allow_failures:
                return Decision(name, True, prints, input=document, overridden=True)
            raise PolicyEvaluationError(
                f"{name}: the policy gave {len(results)} results, the agent needs exactly one",
                hint=f"give data.{PACKAGE}.{name} a default",
            )
        expressions = results[0].get("expressions", [])
        if len(expressions) != 1:
            raise PolicyEvaluationError(
                f"{name}: the policy gave {len(expressions)} expressions, the agent needs one"
            )
        value = expressions[0].get("value")
        allowed, ops = _read_answer(name, value)
        applied: tuple[Mapping[str, Any], ...] = ()
        if allowed and ops:
            self._apply(name, ops)
            applied = tuple(ops)
        if not allowed and allow_failures:
            return Decision(name, True, prints, (), value, document, overridden=True)
        return Decision(name, allowed, prints, applied, value, document)

    def _eval(self, name: str, document: Mapping[str, Any]) -> list[dict[str, Any]]:
        self._engine.set_input(dict(document))
        try:
            answer = json.loads(self._engine.eval_query_as_json(f"data.{PACKAGE}.{name}"))
        except RuntimeError as error:
            self._engine.take_prints()
            raise PolicyEvaluationError(
                f"{name}: policy evaluation failed: {_regorus_message(error)}",
                hint="the agent would fail this request with an internal error"
                " (or, for a failing builtin, treat that expression as undefined)",
            ) from None
        results = answer.get("result", [])
        return results if isinstance(results, list) else []

    def _apply(self, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        try:
            patched = apply_patch(self._data, ops)
        except JsonPatchError as error:
            raise PolicyEvaluationError(
                f"{name}: the policy's ops cannot be applied to the state: {error}",
                hint="the agent fails such a request with an internal error; state is unchanged",
            ) from None
        if not isinstance(patched, dict):
            raise PolicyEvaluationError(f"{name}: the policy's ops replace data with a non-object")
        self._engine.clear_data()
        self._engine.add_data(copy.deepcopy(patched))
        self._data = patched


def _add_policy(engine: Any, source: str, text: str, what: str) -> None:
    """Parse `text` into `engine` as module `source` (named in errors); one package only."""
    try:
        engine.add_policy(source, text)
    except RuntimeError as error:
        raise PolicyLoadError(f"{what} does not load: {_regorus_message(error)}") from None
    packages = [name.removeprefix("data.") for name in engine.get_packages()]
    if packages != [PACKAGE]:
        raise PolicyLoadError(
            f"{what} is package {', '.join(packages)}; the agent queries {PACKAGE}",
            hint=f"start the policy with `package {PACKAGE}`",
        )


def check_rules(text: str, source: str) -> None:
    """Parse Rego rules as the agent's regorus will, without evaluating anything.

    For `generate`, which bakes the rules into every policy: a syntax error is reported as
    `source:line:column` now rather than as a pod the agent refuses later. Parsing alone takes
    milliseconds; loading a whole `AgentPolicy` would evaluate rules too.
    """
    _add_policy(_engine(), source, text, os.path.basename(source))


def _regorus() -> Any:
    """The regorus module, imported on first use: `generate` re-runs whose rules passed the
    check before (`kuberesource/schemacache.py`) evaluate nothing and do not load it."""
    import regorus  # type: ignore[import-untyped]  # noqa: PLC0415

    return regorus


def _engine() -> Any:
    """A regorus engine with the agent's limits on policy text."""
    engine = _regorus().Engine()
    engine.set_policy_length_config(
        max_col=MAX_LINE_LENGTH, max_file_bytes=MAX_FILE_BYTES, max_lines=MAX_LINES
    )
    return engine


def _read_answer(name: str, value: Any) -> tuple[bool, list[Mapping[str, Any]]]:
    """(allowed, ops) from a rule's value, as the agent's serde decoding reads it."""
    if isinstance(value, bool):
        return value, []
    if isinstance(value, dict):
        allowed = value.get("allowed")
        if not isinstance(allowed, bool):
            raise PolicyEvaluationError(
                f"{name}: the policy answered an object whose 'allowed' is not a bool"
            )
        ops = value.get("ops")
        if ops is None:
            return allowed, []
        if not isinstance(ops, list) or not all(is_operation(op) for op in ops):
            raise PolicyEvaluationError(f"{name}: the policy's 'ops' is not an RFC 6902 patch")
        return allowed, ops
    raise PolicyEvaluationError(
        f"{name}: the policy answered {json.dumps(value)[:80]}; the agent needs a bool or"
        " {allowed, ops}"
    )


def _regorus_message(error: BaseException) -> str:
    """`file:line:col: message` from regorus's multi-line report (without its backtrace)."""
    text = str(error).split("\nStack backtrace:", 1)[0]
    location = _ERROR_LOCATION.search(text)
    message = _ERROR_TEXT.search(text)
    if message is None:
        return " ".join(text.split())[:300] or type(error).__name__
    prefix = f"{location.group(1)}: " if location else ""
    return f"{prefix}{message.group(1).strip()}"


# --- lenient builtins ---------------------------------------------------------------------------


def lenient_policy_text(text: str) -> str:
    """The policy with each `to_number(x)` call turned into one that is undefined on failure.

    The helper keeps the name's length, so lines, columns and limits stay those of the original.
    Limits: only `to_number` is guarded; calls written as `data.…to_number` or through `with`
    replacement are left alone; a policy that defines the helper's name itself is refused.
    """
    if re.search(rf"\b{LENIENT_TO_NUMBER}\b", text):
        raise PolicyLoadError(
            f"the policy uses the name {LENIENT_TO_NUMBER}, which is reserved for emulating the"
            " agent's lenient builtins"
        )
    return _REGO_TOKENS.sub(
        lambda match: LENIENT_TO_NUMBER if match.group("call") else match.group(0), text
    )


def _to_number_defined(value: Any) -> bool:
    """Whether regorus's `to_number(value)` succeeds (so the lenient helper is defined)."""
    if value is None or isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and _string_is_number(value)


@lru_cache(maxsize=4096)
def _string_is_number(text: str) -> bool:
    # Ask regorus itself: its number syntax is its own (" 1" parses, "007" and "+3" do not).
    probe = _regorus().Engine()
    probe.set_input({"x": text})
    try:
        probe.eval_query("to_number(input.x)")
    except RuntimeError:
        return False
    return True
