# Contrast's rules for the Kata agent policy (SPDX-License-Identifier: Apache-2.0).
#
# The agent evaluates data.agent_policy.<request message name> for every ttRPC request, with the
# request as input (every protobuf field present), and reads back a bool or {"allowed", "ops"}.
# "ops" is an RFC 6902 patch the agent applies to data, which is how these rules remember the
# sandbox name, namespace, network namespace and which policy container each container id is.
#
# What a request may look like comes from policy_data (appended to this file by `contrast
# generate`): one entry per container of the pod (index 0 is the pause container) plus the
# settings' common values and request defaults. The layout is genpolicy's, so data generated for
# Kata's rules works here too.
#
# Only builtins the agent's regorus has are used (strings, regex, bits, arrays, objects, count,
# base64url.encode, print); to_number is never called on text that might not be a number.
#
# On a denial the rules print which check failed and what the policy expected; the agent puts
# these lines into the error the kubelet reports (`contrast policy explain` shows them too).

package agent_policy

###########################################################################################
# Every request the agent may query needs a value, or the agent reports an error.

default AddARPNeighborsRequest := false
default AddSwapPathRequest := false
default AddSwapRequest := false
default AllowRequestsFailingPolicy := false
default CloseStdinRequest := false
default CopyFileRequest := false
default CreateContainerRequest := false
default CreateSandboxRequest := false
default DestroySandboxRequest := true
default ExecProcessRequest := false
default GetDiagnosticDataRequest := false
default GetIPTablesRequest := false
default GetMetricsRequest := false
default GetOOMEventRequest := true
default GuestDetailsRequest := true
default ListInterfacesRequest := false
default ListRoutesRequest := false
default MemAgentCompactConfig := false
default MemAgentMemcgConfig := false
default MemHotplugByProbeRequest := false
default OnlineCPUMemRequest := true
default PauseContainerRequest := false
default ReadStreamRequest := false
default RemoveContainerRequest := false
default RemoveStaleVirtiofsShareMountsRequest := true
default ReseedRandomDevRequest := false
default ResizeVolumeRequest := false
default ResumeContainerRequest := false
default SetGuestDateTimeRequest := false
default SetIPTablesRequest := false
default SetPolicyRequest := false
default SignalProcessRequest := true
default StartContainerRequest := true
default StartTracingRequest := false
default StatsContainerRequest := true
default StopTracingRequest := false
default TtyWinResizeRequest := true
default UpdateContainerRequest := false
default UpdateEphemeralMountsRequest := false
default UpdateInterfaceRequest := false
default UpdateRoutesRequest := false
default VolumeStatsRequest := false
default WaitProcessRequest := true
default WriteStreamRequest := false

# Requests the settings switch on or off (request_defaults.<name> = true allows them).
CloseStdinRequest if policy_data.request_defaults.CloseStdinRequest == true

GetDiagnosticDataRequest if policy_data.request_defaults.GetDiagnosticDataRequest == true

ReadStreamRequest if policy_data.request_defaults.ReadStreamRequest == true

UpdateEphemeralMountsRequest if policy_data.request_defaults.UpdateEphemeralMountsRequest == true

WriteStreamRequest if policy_data.request_defaults.WriteStreamRequest == true

###########################################################################################
# Names and small helpers.

SANDBOX_NAME := "io.kubernetes.cri.sandbox-name"

SANDBOX_NAMESPACE := "io.kubernetes.cri.sandbox-namespace"

SANDBOX_ID := "io.kubernetes.cri.sandbox-id"

CRI_TYPE := "io.kubernetes.cri.container-type"

KATA_TYPE := "io.katacontainers.pkg.oci.container_type"

CONTAINER_NAME := "io.kubernetes.cri.container-name"

BUNDLE_PATH := "io.katacontainers.pkg.oci.bundle_path"

NETNS := "nerdctl/network-namespace"

LOG_DIRECTORY := "io.kubernetes.cri.sandbox-log-directory"

CDI_VFIO_PREFIX := "cdi.k8s.io/vfio"

# What a $(bundle-id) looks like: containerd's 64 hex digits, or a readable id in tests.
BUNDLE_ID_REGEX := "([0-9a-f]{64}|[a-z0-9][a-z0-9.-]*)"

common := policy_data.common

# A value that is null when absent, so that failure reports are never undefined.
get(object, key) := object.get(object_or_empty(object), key, null)

object_or_empty(value) := value if is_object(value)

else := {}

input_annotations := object_or_empty(input.OCI.Annotations)

input_annotation(key) := get(input_annotations, key)

# Which text the rules print for a value they could not find.
shown(value) := value if value != null

else := "<absent>"

# regex.match on values that may be absent (null): the agent's engine would call that undefined,
# stricter engines raise, so the rules never pass it anything but strings.
matches(pattern, value) if {
	is_string(pattern)
	is_string(value)
	regex.match(pattern, value)
}

text(value) := value if is_string(value)

else := ""

is_ipv4(value) if regex.match(concat("", ["^", common.ipv4_a, "$"]), value)

is_number_text(value) if regex.match("^[0-9]+$", value)

# "$$" in policy text stands for a literal "$".
unescape(text) := replace(text, "$$", "$")

# The part of `text` before the first "=", and after it.
env_name(variable) := substring(variable, 0, indexof(variable, "="))

env_value(variable) := substring(variable, indexof(variable, "=") + 1, -1)

###########################################################################################
# State: values the first request fixes and every later request must repeat.

state := object_or_empty(data.pstate)

state_path(key) := concat("", ["/pstate/", key])

# [] when the state already holds `value` under `key`; an add op when the key is new;
# undefined (so the request is denied) when the state holds a different value.
state_ops(key, value) := [] if {
	key in object.keys(state)
	state[key] == value
}

state_ops(key, value) := [{"op": "add", "path": state_path(key), "value": value}] if {
	not key in object.keys(state)
}

state_conflict(key, value) := {{"check": concat("", ["state ", key]), "policy": state[key], "request": value}} if {
	key in object.keys(state)
	state[key] != value
}

else := set()

###########################################################################################
# CreateContainerRequest

CreateContainerRequest := result if {
	count(create_input_problems) == 0
	idx := min(matching_containers)
	ops := create_state_ops(idx)
	result := {"allowed": true, "ops": ops}
}

CreateContainerRequest := false if {
	not create_container_allowed
	explain_create_container
}

create_container_allowed if {
	count(create_input_problems) == 0
	idx := min(matching_containers)
	create_state_ops(idx)
}

# Request fields no generated container may set: hooks run on the host's terms, and the others
# would change isolation in ways the policy does not describe.
create_input_problems contains "OCI is missing" if not is_object(input.OCI)

create_input_problems contains "shared_mounts must be empty" if count(input.shared_mounts) != 0

create_input_problems contains "string_user must be null" if input.string_user != null

create_input_problems contains concat("", ["OCI.", field, " must be null"]) if {
	some field in ["Hooks", "Solaris", "Windows"]
	input.OCI[field] != null
}

create_input_problems contains "OCI.Linux must be set" if not is_object(input.OCI.Linux)

create_input_problems contains concat("", ["OCI.Linux.", field, " must be empty"]) if {
	some field in ["GIDMappings", "UIDMappings", "MountLabel", "RootfsPropagation"]
	count(input.OCI.Linux[field]) != 0
}

create_input_problems contains concat("", ["OCI.Linux.", field, " must be null"]) if {
	some field in ["IntelRdt", "Seccomp"]
	input.OCI.Linux[field] != null
}

create_input_problems contains "OCI.Linux.Resources must be set" if not is_object(input.OCI.Linux.Resources)

create_input_problems contains "OCI.Linux.Resources.Devices must be empty" if {
	not count(input.OCI.Linux.Resources.Devices) == 0
}

create_input_problems contains concat("", ["OCI.Linux.Resources.", field, " must be null"]) if {
	some field in ["BlockIO", "Network", "Pids"]
	input.OCI.Linux.Resources[field] != null
}

create_input_problems contains "OCI.Process must be set" if not is_object(input.OCI.Process)

create_input_problems contains "OCI.Process.SelinuxLabel must be empty" if count(input.OCI.Process.SelinuxLabel) != 0

create_input_problems contains "OCI.Process.User.Username must be empty" if count(input.OCI.Process.User.Username) != 0

matching_containers contains idx if {
	some idx, p in policy_data.containers
	count(container_problems(p)) == 0
}

create_state_ops(idx) := ops if {
	p := policy_data.containers[idx]
	name_ops := state_ops("sandbox_name", input_annotation(SANDBOX_NAME))
	namespace_ops := create_namespace_ops(p)
	netns_ops := state_ops("network_namespace", input_network_namespace)
	id_ops := state_ops(input.container_id, idx)
	ops := array.concat(array.concat(name_ops, namespace_ops), array.concat(netns_ops, id_ops))
}

# A policy without a namespace takes the first one a request names.
create_namespace_ops(p) := [] if {
	p_namespace := get(p.OCI.Annotations, SANDBOX_NAMESPACE)
	p_namespace != ""
	p_namespace == input_annotation(SANDBOX_NAMESPACE)
}

create_namespace_ops(p) := ops if {
	get(p.OCI.Annotations, SANDBOX_NAMESPACE) == ""
	ops := state_ops("namespace", input_annotation(SANDBOX_NAMESPACE))
}

input_network_namespaces := [ns.Path | some ns in input.OCI.Linux.Namespaces; ns.Type == "network"]

input_network_namespace := "" if count(input_network_namespaces) == 0

input_network_namespace := input_network_namespaces[0] if count(input_network_namespaces) == 1

# Printed when no policy container allows the request: what was wrong with the input itself, the
# state, and for every policy container the checks it failed.
explain_create_container if {
	print("CreateContainerRequest denied for container", input.container_id)
	every problem in create_input_problems {
		print("CreateContainerRequest: request:", problem)
	}
	every conflict in create_state_conflicts {
		print("CreateContainerRequest: state:", conflict.check, "is", conflict.policy, "but the request has", conflict.request)
	}
	every idx, p in policy_data.containers {
		explain_container(idx, p)
	}
}

explain_container(idx, p) if {
	count(create_input_problems) == 0
	every problem in container_problems(p) {
		print("CreateContainerRequest: policy container", idx, container_label(p), "-", problem.check, "expected", problem.policy, "got", problem.request)
	}
}

explain_container(_, _) if count(create_input_problems) != 0

container_label(p) := get(p.OCI.Annotations, CONTAINER_NAME) if get(p.OCI.Annotations, CONTAINER_NAME) != null

else := "(pause)"

create_state_conflicts := (state_conflict("sandbox_name", input_annotation(SANDBOX_NAME)) | state_conflict("network_namespace", shown(object.get({"v": input_network_namespace}, "v", null)))) | namespace_conflicts

namespace_conflicts := state_conflict("namespace", input_annotation(SANDBOX_NAMESPACE)) if {
	some p in policy_data.containers
	get(p.OCI.Annotations, SANDBOX_NAMESPACE) == ""
}

else := set()

# One failed check: its name, what the policy expects and what the request has.
problem(check, expected, got) := {"check": check, "policy": expected, "request": got}

# Every check of one policy container against the request; the container allows the request
# when this set is empty. Each entry names the check, the policy's expectation and the request's
# value, which is what a denial prints.
container_problems(p) := ((((((identity_problems(p) | annotation_problems(p)) | image_problems(p)) | process_problems(p)) | mount_problems(p)) | storage_problems(p)) | linux_problems(p)) | device_problems(p)

identity_problems(p) := (({problem("sandbox_pidns", p.sandbox_pidns, input.sandbox_pidns) | p.sandbox_pidns != input.sandbox_pidns}
	| {problem("OCI.Version", p.OCI.Version, input.OCI.Version) | p.OCI.Version != input.OCI.Version})
	| {problem("OCI.Root.Readonly", p.OCI.Root.Readonly, input.OCI.Root.Readonly) | p.OCI.Root.Readonly != input.OCI.Root.Readonly})
	| {problem("OCI.Root.Path", p.OCI.Root.Path, input.OCI.Root.Path) | not root_path_ok(p)}

###########################################################################################
# Bundle and sandbox ids, taken from the request and checked for consistency.

root_path_regex := concat("", ["^", replace(common.root_path, "$(bundle-id)", BUNDLE_ID_REGEX), "$"])

bundle_id := matches[0][1] if {
	matches := regex.find_all_string_submatch_n(root_path_regex, input.OCI.Root.Path, 1)
	count(matches) == 1
}

sandbox_id := input_annotation(SANDBOX_ID)

root_path_ok(p) if {
	expected := replace(replace(p.OCI.Root.Path, "$(root_path)", common.root_path), "$(bundle-id)", bundle_id)
	expected == input.OCI.Root.Path
}

# Placeholders in mount sources, storage mount points and paths.
substitute(text) := replace(replace(replace(replace(replace(text, "$(sfprefix)", common.sfprefix), "$(cpath)", common.cpath), "$(bundle-id)", bundle_id), "$(sandbox-id)", sandbox_id), "$(spath)", common.spath)

# A policy value starting with "^" is a regex; anything else must be equal.
text_allows(policy_value, request_value) if {
	not startswith(policy_value, "^")
	policy_value == request_value
}

text_allows(policy_value, request_value) if {
	startswith(policy_value, "^")
	regex.match(policy_value, request_value)
}

###########################################################################################
# Annotations

annotation_problems(p) := ((((({problem("annotation keys", "io.kubernetes.cri.*, the policy's keys or runtime_anno_patterns", unexpected_annotations(p)) | count(unexpected_annotations(p)) != 0}
	| {problem(SANDBOX_NAME, get(p.OCI.Annotations, SANDBOX_NAME), input_annotation(SANDBOX_NAME)) | not sandbox_name_ok(p)})
	| {problem(SANDBOX_ID, get(p.OCI.Annotations, SANDBOX_ID), sandbox_id) | not regex_annotation_ok(p, SANDBOX_ID)})
	| {problem(BUNDLE_PATH, get(p.OCI.Annotations, BUNDLE_PATH), input_annotation(BUNDLE_PATH)) | not bundle_path_ok(p)})
	| {problem(key, get(p.OCI.Annotations, key), input_annotation(key)) |
		some key in [CRI_TYPE, KATA_TYPE, CONTAINER_NAME]
		get(p.OCI.Annotations, key) != input_annotation(key)
	})
	| {problem(NETNS, get(p.OCI.Annotations, NETNS), input_annotation(NETNS)) | not netns_annotation_ok(p)})
	| {problem(LOG_DIRECTORY, get(p.OCI.Annotations, LOG_DIRECTORY), input_annotation(LOG_DIRECTORY)) | not log_directory_ok(p)}

allowed_annotation(p, key, _) if startswith(key, "io.kubernetes.cri.")

allowed_annotation(p, key, _) if key in object.keys(object_or_empty(p.OCI.Annotations))

allowed_annotation(p, key, value) if {
	some key_regex, value_regex in p.runtime_anno_patterns
	regex.match(key_regex, key)
	regex.match(value_regex, value)
}

unexpected_annotations(p) := [key | some key, value in input_annotations; not allowed_annotation(p, key, value)]

sandbox_name_ok(p) if {
	policy_name := get(p.OCI.Annotations, SANDBOX_NAME)
	policy_name != null
	matches(policy_name, input_annotation(SANDBOX_NAME))
}

regex_annotation_ok(p, key) if matches(get(p.OCI.Annotations, key), input_annotation(key))

bundle_path_ok(p) if replace(text(get(p.OCI.Annotations, BUNDLE_PATH)), "$(bundle-id)", bundle_id) == input_annotation(BUNDLE_PATH)

# The pause container carries the network namespace and log directory; others must not.

netns_annotation_ok(p) if {
	get(p.OCI.Annotations, NETNS) == null
	input_annotation(NETNS) == null
}

netns_annotation_ok(p) if regex_annotation_ok(p, NETNS)

log_directory_ok(p) if {
	get(p.OCI.Annotations, LOG_DIRECTORY) == null
	input_annotation(LOG_DIRECTORY) == null
}

log_directory_ok(p) if {
	with_name := replace(text(get(p.OCI.Annotations, LOG_DIRECTORY)), "$(sandbox-name)", text(input_annotation(SANDBOX_NAME)))
	pattern := replace(with_name, "$(sandbox-namespace)", text(input_annotation(SANDBOX_NAMESPACE)))
	matches(pattern, input_annotation(LOG_DIRECTORY))
}

###########################################################################################
# Image: the image a container runs is the one its policy container names. The request names it
# twice: CRI's image-name annotation, and the source of the image_guest_pull storage, which is
# that annotation as the Kata runtime hands it to the guest to pull. Both must be the policy's
# image (Kata's own rules check neither: any io.kubernetes.cri.* value passes and the storage's
# source is a TODO, so a swapped image with the policy's command would start).
#
# A policy image pinned by digest ("repo:tag@sha256:…", as `generate` pins every image) allows a
# reference with the same digest: the digest is what names the content, and containerd spells
# the reference its own way ("repo@sha256:…", without the tag). An unpinned policy image allows
# the same name and tag, in containerd's spelling ("busybox" is docker.io/library/busybox:latest).
#
# The pause container has no image in the policy: in Kata it comes from the guest's measured
# root file system, and its guest-pull storage (if any) names the literal "pause".

CRI_IMAGE_NAME := "io.kubernetes.cri.image-name"

policy_image(p) := get(p.OCI.Annotations, CRI_IMAGE_NAME)

image_problems(p) := {problem(CRI_IMAGE_NAME, policy_image(p), input_annotation(CRI_IMAGE_NAME)) |
	policy_image(p) != null
	not image_allows(policy_image(p), input_annotation(CRI_IMAGE_NAME))
} | {problem("image_guest_pull storage source", image_expected_source(p), storage.source) |
	some storage in guest_pull_storages
	not guest_pull_source_ok(p, storage.source)
}

image_expected_source(p) := policy_image(p) if policy_image(p) != null

else := "pause"

guest_pull_source_ok(p, source) if {
	policy_image(p) != null
	image_allows(policy_image(p), source)
}

guest_pull_source_ok(p, "pause") if policy_image(p) == null

image_allows(policy_ref, request_ref) if {
	is_string(policy_ref)
	is_string(request_ref)
	contains(policy_ref, "@")
	image_digest(policy_ref) == image_digest(request_ref)
}

image_allows(policy_ref, request_ref) if {
	is_string(policy_ref)
	is_string(request_ref)
	not contains(policy_ref, "@")
	normalized_image(policy_ref) == normalized_image(image_without_digest(request_ref))
}

# The digest after "@", lower case; undefined for a reference without one.
image_digest(ref) := lower(substring(ref, indexof(ref, "@") + 1, -1)) if contains(ref, "@")

image_without_digest(ref) := substring(ref, 0, indexof(ref, "@")) if contains(ref, "@")

else := ref

normalized_image(name) := image_with_tag(image_with_domain(name))

# A first path component with a "." or ":", or "localhost", is a registry; the default one is
# docker.io, whose one-component names are under library/.
image_with_domain(name) := with_library(name) if {
	parts := split(name, "/")
	count(parts) > 1
	image_registry_like(parts[0])
}

else := concat("", ["docker.io/", name]) if contains(name, "/")

else := concat("", ["docker.io/library/", name])

with_library(name) := concat("", ["docker.io/library/", substring(name, count("docker.io/"), -1)]) if {
	startswith(name, "docker.io/")
	count(split(name, "/")) == 2
}

else := name

image_registry_like(part) if contains(part, ".")

image_registry_like(part) if contains(part, ":")

image_registry_like(part) if part == "localhost"

image_with_tag(name) := name if {
	parts := split(name, "/")
	contains(parts[count(parts) - 1], ":")
}

else := concat("", [name, ":latest"])

###########################################################################################
# Process

process_problems(p) := ((((({problem("Process.Terminal", p.OCI.Process.Terminal, input.OCI.Process.Terminal) | p.OCI.Process.Terminal != input.OCI.Process.Terminal}
	| {problem("Process.Cwd", object.get(p.OCI.Process, "Cwd", ""), input.OCI.Process.Cwd) | object.get(p.OCI.Process, "Cwd", "") != input.OCI.Process.Cwd})
	| {problem("Process.NoNewPrivileges", p.OCI.Process.NoNewPrivileges, input.OCI.Process.NoNewPrivileges) | p.OCI.Process.NoNewPrivileges != input.OCI.Process.NoNewPrivileges})
	| {problem("Process.User", p.OCI.Process.User, input.OCI.Process.User) | not user_ok(p.OCI.Process.User, input.OCI.Process.User)})
	| {problem("Process.Args", object.get(p.OCI.Process, "Args", []), input.OCI.Process.Args) | not args_ok(object.get(p.OCI.Process, "Args", []), input.OCI.Process.Args)})
	| {problem("Process.Env (variables the policy does not allow)", object.get(p.OCI.Process, "Env", []), bad) |
		bad := disallowed_env(p.OCI.Process, input.OCI.Process.Env, input_annotation(SANDBOX_NAME), input_annotation(SANDBOX_NAMESPACE))
		count(bad) != 0
	})
	| {problem("Process.Capabilities", p.OCI.Process.Capabilities, input.OCI.Process.Capabilities) | not capabilities_ok(p.OCI.Process.Capabilities, input.OCI.Process.Capabilities)}

user_ok(policy_user, request_user) if {
	policy_user.UID == request_user.UID
	policy_user.GID == request_user.GID
	{gid | some gid in policy_user.AdditionalGids} == {gid | some gid in request_user.AdditionalGids}
}

args_ok(policy_args, request_args) if {
	count(policy_args) == count(request_args)
	every i, arg in request_args {
		arg_ok(policy_args[i], arg)
	}
}

arg_ok(policy_arg, arg) if replace(unescape(policy_arg), "$(sandbox-name)", text(input_annotation(SANDBOX_NAME))) == arg

# The node's name is only known at run time.
arg_ok(policy_arg, _) if contains(policy_arg, "$(node-name)")

# Every variable of the request must be allowed; variables of the policy may be missing.
disallowed_env(policy_process, request_env, name, namespace) := [variable |
	some variable in request_env
	not env_allowed(policy_process, variable, name, namespace)
]

env_allowed(pp, variable, name, namespace) if {
	some policy_variable in object.get(pp, "Env", [])
	replace(replace(unescape(policy_variable), "$(sandbox-name)", text(name)), "$(sandbox-namespace)", text(namespace)) == variable
}

# Variables Kubernetes adds (service links, HOSTNAME, …), per the settings' allow list.
env_allowed(_, variable, _, _) if {
	some pattern in policy_data.request_defaults.CreateContainerRequest.allow_env_regex
	filled := replace(replace(replace(replace(pattern, "$(ipv4_a)", common.ipv4_a), "$(ip_p)", common.ip_p), "$(svc_name_downward_env)", common.svc_name_downward_env), "$(dns_label)", common.dns_label)
	regex.match(filled, variable)
}

# Values only the node knows: any value for these names.
env_allowed(pp, variable, _, _) if {
	some policy_variable in object.get(pp, "Env", [])
	contains(policy_variable, "=")
	env_name(policy_variable) == env_name(variable)
	some placeholder in ["$(host-name)", "$(node-name)", "$(pod-uid)", "$(resource-field)", "$(todo-annotation)"]
	contains(env_value(policy_variable), placeholder)
}

# Pod and host IPs: any IPv4 address.
env_allowed(pp, variable, _, _) if {
	some policy_variable in object.get(pp, "Env", [])
	contains(policy_variable, "=")
	env_name(policy_variable) == env_name(variable)
	env_value(policy_variable) in ["$(pod-ip)", "$(host-ip)"]
	is_ipv4(env_value(variable))
}

capabilities_ok(policy_caps, request_caps) if {
	every kind in ["Ambient", "Bounding", "Effective", "Inheritable", "Permitted"] {
		capability_set(policy_caps[kind]) == capability_set(request_caps[kind])
	}
}

expand_caps(caps) := common.default_caps if caps == ["$(default_caps)"]

else := common.privileged_caps if caps == ["$(privileged_caps)"]

else := caps

capability_set(caps) := {trim_prefix(cap, "CAP_") | some cap in expand_caps(caps)}

###########################################################################################
# Mounts: every mount of the request must be one the policy describes, at most once each.

mount_problems(p) := {problem("OCI.Mounts (mounts the policy does not allow, or a destination twice)", object.get(p.OCI, "Mounts", []), unexpected_mounts(p)) | not mounts_ok(p)}

mounts_ok(p) if {
	count(unexpected_mounts(p)) == 0
	count({m.destination | some m in input.OCI.Mounts}) == count(input.OCI.Mounts)
}

unexpected_mounts(p) := [m | some m in input.OCI.Mounts; not mount_allowed(p, m)]

mount_allowed(p, request_mount) if {
	some policy_mount in object.get(p.OCI, "Mounts", [])
	policy_mount.destination == request_mount.destination
	policy_mount.type_ == request_mount.type_
	mount_options_ok(policy_mount, request_mount)
	mount_source_ok(policy_mount.source, request_mount)
}

mount_options_ok(policy_mount, request_mount) if policy_mount.options == request_mount.options

# The guest kernel may add cgroup2 mount options the settings allow.
mount_options_ok(policy_mount, request_mount) if {
	policy_mount.type_ == "cgroup"
	every option in policy_mount.options {
		option in request_mount.options
	}
	every option in request_mount.options {
		mount_option_known(policy_mount, option)
	}
}

mount_option_known(policy_mount, option) if option in policy_mount.options

mount_option_known(_, option) if option in object.get(policy_data.cluster_config, "cgroup_mount_extras_allowed", [])

# A block volume's mount has no fixed source: it is where its storage is mounted.
mount_source_ok("", request_mount) if {
	some storage in input.storages
	storage.mount_point == request_mount.source
}

mount_source_ok(policy_source, request_mount) if {
	policy_source != ""
	text_allows(substitute(policy_source), request_mount.source)
}

###########################################################################################
# Storages: the volumes the guest mounts itself.

storage_problems(p) := {problem("storages", p.storages, volume_storages) | not storages_ok(p)}
	| {problem("image_guest_pull storage", "at most one, overlay at the root path, only with guest pull", guest_pull_storages) | not guest_pull_ok}

guest_pull_storages := [s | some s in input.storages; s.driver == "image_guest_pull"]

volume_storages := [s | some s in input.storages; s.driver != "image_guest_pull"]

guest_pull_ok if count(guest_pull_storages) == 0

guest_pull_ok if {
	count(guest_pull_storages) == 1
	policy_data.cluster_config.guest_pull == true
	guest_pull_storages[0].fstype == "overlay"
	guest_pull_storages[0].mount_point == input.OCI.Root.Path
}

storages_ok(p) if {
	count(p.storages) == count(volume_storages)
	every request_storage in volume_storages {
		some policy_storage in p.storages
		storage_ok(policy_storage, request_storage)
	}
	every policy_storage in p.storages {
		some request_storage in volume_storages
		storage_ok(policy_storage, request_storage)
	}
}

storage_ok(policy_storage, request_storage) if {
	storage_driver_ok(policy_storage.driver, request_storage.driver)
	policy_storage.driver_options == request_storage.driver_options
	storage_source_ok(policy_storage.source, request_storage.source)
	policy_storage.fstype == request_storage.fstype
	policy_storage.options == request_storage.options
	policy_storage.fs_group == request_storage.fs_group
	policy_storage.shared == request_storage.shared
	storage_mount_point_ok(policy_storage.mount_point, request_storage)
}

# An empty driver or source stands for a block device the runtime attaches (emptyDir on a
# block device): the driver is virtio-blk or virtio-scsi, the source its PCI or SCSI address.
storage_driver_ok("", driver) if driver in ["blk", "scsi"]

storage_driver_ok(policy_driver, driver) if {
	policy_driver != ""
	policy_driver == driver
}

storage_source_ok("", _) := true

storage_source_ok(policy_source, source) if {
	policy_source != ""
	text_allows(substitute(policy_source), source)
}

storage_mount_point_ok(policy_point, request_storage) if {
	with_device := replace(policy_point, "$(b64_device_id)", base64url.encode(request_storage.source))
	text_allows(substitute(with_device), request_storage.mount_point)
}

###########################################################################################
# Linux: namespaces, masked and read-only paths, devices, sysctls.

linux_problems(p) := ((({problem("Linux.Namespaces", p.OCI.Linux.Namespaces, input.OCI.Linux.Namespaces) | not namespaces_ok(p.OCI.Linux.Namespaces, input.OCI.Linux.Namespaces)}
	| {problem("Linux.MaskedPaths", p.OCI.Linux.MaskedPaths, input.OCI.Linux.MaskedPaths) | not masked_paths_ok(p.OCI.Linux, input.OCI.Linux)})
	| {problem("Linux.ReadonlyPaths", p.OCI.Linux.ReadonlyPaths, input.OCI.Linux.ReadonlyPaths) | not readonly_paths_ok(p.OCI.Linux, input.OCI.Linux)})
	| {problem("Linux.Devices", p.OCI.Linux.Devices, input.OCI.Linux.Devices) | not linux_devices_ok(p.OCI.Linux, input.OCI.Linux)})
	| {problem("Linux.Sysctl", object.get(p.OCI.Linux, "Sysctl", {}), input.OCI.Linux.Sysctl) | not sysctl_ok(object.get(p.OCI.Linux, "Sysctl", {}), input.OCI.Linux.Sysctl)}

# The network and cgroup namespaces are the runtime's business (the network one is pinned in
# the state instead); "mnt" and "mount" name the same namespace.
namespace_type(type_) := "mount" if type_ == "mnt"

else := type_

namespaces_ok(policy_namespaces, request_namespaces) if {
	wanted := {{"Type": namespace_type(ns.Type), "Path": ns.Path} | some ns in policy_namespaces}
	given := {{"Type": namespace_type(ns.Type), "Path": ns.Path} |
		some ns in request_namespaces
		not ns.Type in ["network", "cgroup"]
	}
	wanted == given
}

masked_paths_ok(pl, il) if {
	every path in pl.MaskedPaths {
		path in il.MaskedPaths
	}
}

readonly_paths_ok(pl, il) if {
	every path in pl.ReadonlyPaths {
		readonly_path_present(path, il)
	}
}

readonly_path_present(path, il) if path in il.ReadonlyPaths

readonly_path_present(path, il) if path in il.MaskedPaths

linux_devices_ok(pl, il) if {
	every device in il.Devices {
		some policy_device in pl.Devices
		policy_device.Path == device.Path
	}
}

sysctl_ok(policy_sysctl, request_sysctl) if {
	every key, value in request_sysctl {
		object.get(policy_sysctl, key, null) == value
	}
}

###########################################################################################
# Devices, including VFIO GPUs correlated with their CDI annotations.

vfio_prefix := object.get(object.get(policy_data.devices, "vfio", {}), "device_path", "")

is_vfio(path) if {
	vfio_prefix != ""
	startswith(path, vfio_prefix)
	is_number_text(substring(path, count(vfio_prefix), -1))
}

device_problems(p) := {problem("devices", p.devices, input.devices) | not devices_ok(p)}
	| {problem("VFIO devices and CDI annotations", count(policy_vfio_devices(p)), {"devices": input_vfio_numbers, "annotations": cdi_numbers}) | not vfio_ok(p)}

devices_ok(p) if {
	every device in input.devices {
		device_allowed(p, device)
	}
}

device_allowed(_, device) if is_vfio(device.container_path)

device_allowed(p, device) if {
	not is_vfio(device.container_path)
	some policy_device in p.devices
	policy_device.container_path == device.container_path
}

policy_vfio_devices(p) := [d | some d in p.devices; vfio_prefix != ""; d.container_path == vfio_prefix]

input_vfio_devices := [d | some d in input.devices; is_vfio(d.container_path)]

input_vfio_numbers := [substring(d.container_path, count(vfio_prefix), -1) | some d in input_vfio_devices]

cdi_numbers := {trim_prefix(key, CDI_VFIO_PREFIX) | some key, _ in input_annotations; startswith(key, CDI_VFIO_PREFIX)}

# Hot plug: each device has its own number, and the annotations name exactly these numbers.
vfio_ok(p) if {
	count(input_vfio_devices) > 0
	count(input_vfio_devices) == count(policy_vfio_devices(p))
	every d in input_vfio_devices {
		some policy_device in policy_vfio_devices(p)
		policy_device.type_ == d.type_
	}
	numbers := {n | some n in input_vfio_numbers}
	count(numbers) == count(input_vfio_numbers)
	numbers == cdi_numbers
}

# Cold plug (or no GPU): as many distinct annotations as the policy has devices.
vfio_ok(p) if {
	count(input_vfio_devices) == 0
	count(cdi_numbers) == count(policy_vfio_devices(p))
}

###########################################################################################
# RemoveContainerRequest: forget the container's policy index.

RemoveContainerRequest := {"allowed": true, "ops": [{"op": "remove", "path": state_path(input.container_id)}]} if {
	input.container_id in object.keys(state)
}

# A container this policy never created (its create failed) has nothing to forget.
RemoveContainerRequest := {"allowed": true, "ops": []} if {
	not input.container_id in object.keys(state)
}

###########################################################################################
# ExecProcessRequest: only the commands the pod declares (probes, hooks) or the settings allow,
# in a container this policy created, with that container's process settings.

ExecProcessRequest if count(exec_problems) == 0

ExecProcessRequest := false if {
	count(exec_problems) != 0
	every problem in exec_problems {
		print("ExecProcessRequest denied:", problem)
	}
}

exec_container := policy_data.containers[state[input.container_id]] if is_string(input.container_id)

exec_problems contains "the container is not one this policy created" if not exec_container

exec_problems contains "string_user must be null" if input.string_user != null

exec_problems contains "process must be set" if not is_object(input.process)

exec_problems contains "process.SelinuxLabel must be empty" if input.process.SelinuxLabel != ""

exec_problems contains "process.ApparmorProfile must be empty" if input.process.ApparmorProfile != ""

exec_problems contains "process.Capabilities must be null" if input.process.Capabilities != null

exec_problems contains concat("", ["command ", concat(" ", input.process.Args), " is not allowed"]) if {
	exec_container
	not exec_command_allowed
}

exec_problems contains concat("", ["process.", field, " differs from the container's"]) if {
	some field in ["Terminal", "NoNewPrivileges"]
	exec_container.OCI.Process[field] != input.process[field]
}

exec_problems contains "process.Cwd differs from the container's" if {
	object.get(exec_container.OCI.Process, "Cwd", "") != input.process.Cwd
}

exec_problems contains "process.User differs from the container's" if {
	exec_container
	not user_ok(exec_container.OCI.Process.User, input.process.User)
}

exec_problems contains concat("", ["process.Env has variables the container does not: ", concat(" ", bad)]) if {
	bad := disallowed_env(exec_container.OCI.Process, input.process.Env, object.get(state, "sandbox_name", ""), object.get(state, "namespace", ""))
	count(bad) != 0
}

exec_command_allowed if {
	some command in policy_data.request_defaults.ExecProcessRequest.allowed_commands
	command == input.process.Args
}

exec_command_allowed if {
	some command in exec_container.exec_commands
	command == input.process.Args
}

exec_command_allowed if {
	some pattern in policy_data.request_defaults.ExecProcessRequest.regex
	regex.match(pattern, concat(" ", input.process.Args))
}

###########################################################################################
# CreateSandboxRequest

CreateSandboxRequest if count(sandbox_problems) == 0

CreateSandboxRequest := false if {
	count(sandbox_problems) != 0
	every problem in sandbox_problems {
		print("CreateSandboxRequest denied:", problem)
	}
}

sandbox_problems contains "guest_hook_path must be empty" if input.guest_hook_path != ""

sandbox_problems contains "kernel_modules must be empty" if count(input.kernel_modules) != 0

sandbox_problems contains "sandbox_pidns must be false" if input.sandbox_pidns != false

sandbox_problems contains concat("", ["storage at ", storage.mount_point, " is not one of policy_data.sandbox.storages"]) if {
	some storage in input.storages
	not storage in policy_data.sandbox.storages
}

###########################################################################################
# CopyFileRequest: files the runtime copies into the shared directory (no guest file system).

CopyFileRequest if count(copy_file_problems) == 0

CopyFileRequest := false if {
	count(copy_file_problems) != 0
	every problem in copy_file_problems {
		print("CopyFileRequest denied:", problem)
	}
}

# Any path component ".." (a name ending in dots is fine).
has_parent_component(path) if regex.match(`(^|/)\.\.(/|$)`, path)

copy_file_regexes := [concat("", ["^", trim_prefix(r3, "^")]) |
	some r1 in policy_data.request_defaults.CopyFileRequest
	r2 := replace(r1, "$(sfprefix)", common.sfprefix)
	r3 := replace(replace(r2, "$(cpath)", common.cpath), "$(bundle-id)", "[a-z0-9]{64}")
]

copy_file_problems contains concat("", ["path ", input.path, " has a .. component"]) if has_parent_component(input.path)

copy_file_problems contains concat("", ["path ", input.path, " is outside the shared directory"]) if {
	not copy_path_allowed
}

copy_path_allowed if {
	some r in copy_file_regexes
	regex.match(r, input.path)
}

copy_file_problems contains concat("", ["file type ", input.file_type, " cannot be copied"]) if {
	not input.file_type in ["Regular", "Directory", "Symlink"]
}

# A symlink below a container's top-level entry, pointing within it.
copy_file_problems contains "a symlink must be below a top-level entry" if {
	input.file_type == "Symlink"
	not symlink_below_top_level
}

symlink_below_top_level if {
	some r in copy_file_regexes
	regex.match(concat("", [r, "[^/]*/."]), input.path)
}

copy_file_problems contains "a symlink target must be relative and stay below its directory" if {
	input.file_type == "Symlink"
	not symlink_target_ok
}

symlink_target_ok if {
	is_string(input.symlink_target)
	not startswith(input.symlink_target, "/")
	not has_parent_component(input.symlink_target)
}

###########################################################################################
# Networking: the host sets up interfaces, routes and neighbours, but not the loopback ones the
# workload trusts.

UpdateInterfaceRequest if count(interface_problems) == 0

UpdateInterfaceRequest := false if {
	count(interface_problems) != 0
	every problem in interface_problems {
		print("UpdateInterfaceRequest denied:", problem)
	}
}

interface_defaults := policy_data.request_defaults.UpdateInterfaceRequest

interface_problems contains "interface must be set" if not is_object(input.interface)

interface_problems contains concat("", ["interface name ", input.interface.name, " is forbidden"]) if {
	input.interface.name in interface_defaults.forbidden_names
}

interface_problems contains concat("", ["hardware address ", input.interface.hwAddr, " is forbidden"]) if {
	input.interface.hwAddr in interface_defaults.forbidden_hw_addrs
}

interface_problems contains "raw_flags has flags outside allow_raw_flags" if {
	bits.and(input.interface.raw_flags, interface_defaults.allow_raw_flags) != input.interface.raw_flags
}

UpdateRoutesRequest if count(route_problems) == 0

UpdateRoutesRequest := false if {
	count(route_problems) != 0
	every problem in route_problems {
		print("UpdateRoutesRequest denied:", problem)
	}
}

route_defaults := policy_data.request_defaults.UpdateRoutesRequest

route_problems contains "routes must be set" if not is_object(input.routes)

route_problems contains concat("", ["route device ", route.device, " is forbidden"]) if {
	some route in input.routes.Routes
	route.device in route_defaults.forbidden_device_names
}

route_problems contains concat("", ["route source ", route.source, " is forbidden"]) if {
	some route in input.routes.Routes
	some pattern in route_defaults.forbidden_source_regex
	regex.match(pattern, route.source)
}

AddARPNeighborsRequest if count(neighbor_problems) == 0

AddARPNeighborsRequest := false if {
	count(neighbor_problems) != 0
	every problem in neighbor_problems {
		print("AddARPNeighborsRequest denied:", problem)
	}
}

neighbor_defaults := policy_data.request_defaults.AddARPNeighborsRequest

# NTF_PROXY | NTF_ROUTER
NEIGHBOR_FLAGS := 136

neighbor_problems contains "neighbors must be set" if not is_object(input.neighbors)

neighbor_problems contains concat("", ["neighbor device ", neighbor.device, " is forbidden"]) if {
	some neighbor in input.neighbors.ARPNeighbors
	neighbor.device in neighbor_defaults.forbidden_device_names
}

neighbor_problems contains "a neighbor needs an address without a mask" if {
	some neighbor in input.neighbors.ARPNeighbors
	not neighbor_address_ok(neighbor)
}

neighbor_address_ok(neighbor) if {
	is_object(neighbor.toIPAddress)
	neighbor.toIPAddress.mask == ""
}

neighbor_problems contains concat("", ["neighbor address ", neighbor.toIPAddress.address, " is forbidden"]) if {
	some neighbor in input.neighbors.ARPNeighbors
	some pattern in neighbor_defaults.forbidden_cidrs_regex
	regex.match(pattern, neighbor.toIPAddress.address)
}

neighbor_problems contains "a neighbor state is not allowed" if {
	some neighbor in input.neighbors.ARPNeighbors
	not neighbor.state in neighbor_defaults.allowed_states
}

neighbor_problems contains "a neighbor has flags other than NTF_PROXY and NTF_ROUTER" if {
	some neighbor in input.neighbors.ARPNeighbors
	bits.and(neighbor.flags, NEIGHBOR_FLAGS) != neighbor.flags
}
