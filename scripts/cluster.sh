#!/usr/bin/env bash
# A one-node Kubernetes cluster for the tests, built from the official source modules pinned in
# tools/kubernetes/go.mod (the one place the version is named).
#
#   bash scripts/cluster.sh up DIR     builds or reuses the binaries, starts the cluster, writes
#                                      DIR/kubeconfig (admin) and DIR/registry-address, returns when the
#                                      node is Ready and CoreDNS answers through its Service
#   bash scripts/cluster.sh down DIR   stops it and removes what it made, the TEE servers and
#                                      sandbox folders of its pods under the emulated runtime too
#                                      (idempotent, and safe after a failed up)
#   bash scripts/cluster.sh build      only builds (or finds) the binaries; prints their folder
#   bash scripts/cluster.sh supervise-containerd CONFIG
#                                      (internal: up starts it in the node's namespaces) runs the
#                                      containerd of CONFIG, DIR/containerd/config.toml, and starts it
#                                      again whenever it exits, its pid always in DIR/containerd.pid
#   bash scripts/cluster.sh install-runtime DIR PLATFORM PYTHON
#                                      gives the running cluster in DIR the emulated confidential
#                                      runtime of PLATFORM (emulated-snp, emulated-tdx): the project's
#                                      node installer, run by PYTHON (one with Contrast, e.g. the
#                                      repo's .venv/bin/python), adds it to DIR's containerd config;
#                                      this script restarts that containerd and applies the
#                                      RuntimeClass of `contrast runtime --platform PLATFORM`
#
# containerd runs under that small supervisor, as on a node whose init is not systemd (runit, s6,
# OpenRC): restarting it is a SIGTERM to the pid in DIR/containerd.pid, which is what the node
# installer's DaemonSet does with the target config key containerd-pid-file.
#
# Everything but the binaries' cache lives in DIR and in a network namespace of its own,
# contrast-kcN: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a containerd with CRI
# (root, state and socket under DIR), kubelet, kube-proxy (iptables), CoreDNS and a registry (Debian's
# docker-registry) all run in it, so its bridge, veths and iptables chains are nowhere else and go
# with it, and two clusters (two sessions' tests) do not meet. A veth pair joins it to the host:
# 198.18.N.1 outside, 198.18.N.2 (the node address, where the API server and registry listen)
# inside. 198.18.0.0/15 is reserved for tests and used nowhere else here; the namespace has no
# default route, so nothing in it reaches beyond this machine, and CoreDNS serves cluster.local only
# (no forward plugin in our build).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
MODULE=$REPO/tools/kubernetes
# Bump when the build's flags or outputs change, so that caches made by an older script are not reused.
BUILD_REVISION=1
POD_CIDR=198.19.0.0/17
SERVICE_CIDR=198.19.128.0/20
KUBERNETES_SERVICE_IP=198.19.128.1
DNS_SERVICE_IP=198.19.128.10
NODE_NAME=contrast-node
PAUSE_IMAGE=contrast.local/pause:3.10
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

die() {
    echo "cluster.sh: $*" >&2
    exit 1
}

kubernetes_version() {
    awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$MODULE/go.mod"
}

cache_dir() {
    local key
    key=$(cd "$MODULE" && cat go.mod go.sum $(find . -name '*.go' | LC_ALL=C sort) <(echo "revision $BUILD_REVISION") |
        sha256sum | cut -c1-64)
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/contrast/kubernetes/$key"
}

# Builds every command in one go build, so the packages they share compile once, into a cache keyed
# by go.mod, go.sum and our mains: a second session reuses it, a changed pin builds anew.
build() {
    local cache version minor
    cache=$(cache_dir)
    if [ -f "$cache/complete" ]; then
        echo "$cache"
        return
    fi
    command -v go >/dev/null || die "go is missing: the cluster is built from source with Go (1.24 or later)"
    mkdir -p "$cache"
    exec 9>"$cache.lock"
    flock 9 # another session may be building the same cache
    if [ -f "$cache/complete" ]; then
        echo "$cache"
        return
    fi
    version=$(kubernetes_version)
    [ -n "$version" ] || die "no k8s.io/kubernetes version in $MODULE/go.mod"
    minor=$(echo "$version" | cut -d. -f2)
    local ldflags="-s -w"
    local package
    for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
        ldflags+=" -X $package.gitTreeState=clean"
    done
    local packages=()
    for package in "${COMMANDS[@]}"; do
        packages+=("k8s.io/kubernetes/cmd/$package")
    done
    rm -rf "$cache/bin.partial"
    echo "cluster.sh: building Kubernetes $version, etcd and CoreDNS into $cache (cold: 11 CPU-minutes, 6 to 16 minutes on 2 cores)" >&2
    local started=$SECONDS
    (cd "$MODULE" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$cache/bin.partial/" \
        "${packages[@]}" ./etcd ./coredns ./pause) || die "go build failed (see above)"
    rm -rf "$cache/bin"
    mv "$cache/bin.partial" "$cache/bin"
    pause_archive "$cache/bin/pause" "$cache/pause.tar"
    echo "$((SECONDS - started))" >"$cache/build-seconds"
    touch "$cache/complete"
    echo "cluster.sh: built in $((SECONDS - started)) s" >&2
    echo "$cache"
}

# The pod sandbox image as a docker archive for `ctr images import` (registry.k8s.io is out of
# reach): one layer holding our static pause program.
pause_archive() {
    local binary=$1 archive=$2 work layer_digest config_digest
    work=$(mktemp -d)
    mkdir "$work/root" "$work/image"
    install -m 0755 "$binary" "$work/root/pause"
    tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/root" -cf "$work/layer.tar" pause
    layer_digest=$(sha256sum "$work/layer.tar" | cut -c1-64)
    mkdir "$work/image/$layer_digest"
    mv "$work/layer.tar" "$work/image/$layer_digest/layer.tar"
    printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
        "$layer_digest" >"$work/config.json"
    config_digest=$(sha256sum "$work/config.json" | cut -c1-64)
    mv "$work/config.json" "$work/image/$config_digest.json"
    printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
        "$config_digest" "$PAUSE_IMAGE" "$layer_digest" >"$work/image/manifest.json"
    tar -C "$work/image" -cf "$archive.partial" .
    mv "$archive.partial" "$archive"
    rm -rf "$work"
}

# --- up ------------------------------------------------------------------------------------------

inns() {
    nsenter --net="/run/netns/$NETNS" -- "$@"
}

# Starts NAME in the cluster's namespace, in a session of its own (it outlives this script), with
# its output in DIR/logs/NAME.log and its pid in DIR/NAME.pid.
start() {
    local name=$1
    shift
    setsid nsenter --net="/run/netns/$NETNS" -- "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$DIR/$name.pid"
    echo "$name" >>"$DIR/started"
}

# The cluster's mount namespace (made by up: mount_namespace), where containerd and the kubelet run
# and so every pod's mounts are made.
mount_ns() {
    echo "$DIR/mnt/ns"
}

# Starts NAME as start does, inside the cluster's mount namespace as well.
start_in_node() {
    local name=$1
    shift
    setsid nsenter --mount="$(mount_ns)" --net="/run/netns/$NETNS" -- "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$DIR/$name.pid"
    echo "$name" >>"$DIR/started"
}

# A mount namespace of the cluster's own for containerd and the kubelet, a slave of the host's
# (what the host mounts shows in it, nothing it mounts shows on the host), pinned by a file in DIR.
# In it the node's log folders are the cluster's: /var/log/pods is DIR/pod-logs and
# /var/log/containers DIR/container-logs. The kubelet keeps pod logs in /var/log/pods, as on a
# node, since every policy pins a sandbox's log directory there; and a kubelet removes every
# folder in its pod log directory that is not one of its own pods, so two clusters of this
# machine may not share the host's. down unmounts it with the rest under DIR.
mount_namespace() {
    mkdir -p "$DIR/mnt" "$DIR/pod-logs" "$DIR/container-logs" /var/log/pods /var/log/containers
    mount --bind "$DIR/mnt" "$DIR/mnt"
    mount --make-private "$DIR/mnt"
    touch "$(mount_ns)"
    unshare --mount="$(mount_ns)" --propagation slave true || die "unshare of a mount namespace failed"
    nsenter --mount="$(mount_ns)" -- mount --bind "$DIR/pod-logs" /var/log/pods
    nsenter --mount="$(mount_ns)" -- mount --bind "$DIR/container-logs" /var/log/containers
}

failed() {
    local name=$1
    shift
    echo "cluster.sh: $name: $*" >&2
    if [ -f "$DIR/logs/$name.log" ]; then
        echo "--- last lines of $DIR/logs/$name.log ---" >&2
        tail -n 40 "$DIR/logs/$name.log" >&2
    fi
    echo "cluster.sh: what started is still running: bash $0 down $DIR" >&2
    exit 1
}

alive() {
    local pid
    pid=$(cat "$DIR/$1.pid" 2>/dev/null) && running "$pid"
}

# Waits until the command succeeds; fails with NAME's log when NAME exits or SECONDS pass.
wait_for() {
    local name=$1 seconds=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        alive "$name" || failed "$name" "exited while starting"
        [ $SECONDS -lt $deadline ] || failed "$name" "not ready after $seconds s (waited for: $*)"
        sleep 0.2
    done
}

certificate() { # NAME SUBJECT EXTENDED_USAGE [SUBJECT_ALT_NAMES]
    local name=$1 subject=$2 usage=$3 sans=${4:-}
    local pki=$DIR/pki
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
        -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [ -z "$sans" ] || echo "subjectAltName=$sans"
    } >"$pki/$name.ext"
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 365 -extfile "$pki/$name.ext" \
        -out "$pki/$name.crt" 2>/dev/null
    rm "$pki/$name.csr" "$pki/$name.ext"
}

kubeconfig() { # FILE CERTIFICATE_NAME
    local pki=$DIR/pki
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: contrast
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$2.crt")
    client-key-data: $(base64 -w0 "$pki/$2.key")
contexts:
- name: contrast
  context:
    cluster: contrast
    user: $2
current-context: contrast
EOF
    chmod 0600 "$1"
}

make_namespace() {
    local slot
    for slot in $(seq 1 250); do
        if ip netns add "contrast-kc$slot" 2>/dev/null; then
            echo "$slot" >"$DIR/slot"
            return
        fi
    done
    die "no free network namespace contrast-kc1..250 (clusters left running? bash scripts/cluster.sh down DIR)"
}

network() {
    local host=kc$SLOT-host
    ip link add "$host" type veth peer name "kc$SLOT-node"
    ip link set "kc$SLOT-node" netns "$NETNS"
    ip addr add "198.18.$SLOT.1/24" dev "$host"
    ip link set "$host" up
    inns ip link set lo up
    inns ip link set "kc$SLOT-node" name eth0
    inns ip addr add "$NODE_IP/24" dev eth0
    inns ip link set eth0 up
    # Pods reach the node (API server, CoreDNS) through the bridge; there is no default route out.
    # Services need a route for the namespace's own processes (a local packet is routed before
    # kube-proxy's DNAT): to the veth, where an address kube-proxy does not know ends at the host,
    # which does not forward.
    inns ip route add "$SERVICE_CIDR" dev eth0 src "$NODE_IP"
    inns sysctl -qw net.ipv4.ip_forward=1
}

pki() {
    local pki=$DIR/pki
    mkdir -p "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=contrast test cluster CA" -keyout "$pki/ca.key" -out "$pki/ca.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    certificate apiserver "/CN=kube-apiserver" serverAuth \
        "IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    certificate apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    certificate admin "/O=system:masters/CN=contrast-admin" clientAuth
    certificate controller-manager "/CN=system:kube-controller-manager" clientAuth
    certificate scheduler "/CN=system:kube-scheduler" clientAuth
    certificate kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    certificate kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
    certificate kube-proxy "/CN=system:kube-proxy" clientAuth
    certificate coredns "/CN=system:coredns" clientAuth
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/service-account.key"
    openssl ec -in "$pki/service-account.key" -pubout -out "$pki/service-account.pub" 2>/dev/null
    chmod 0600 "$pki"/*.key
    kubeconfig "$DIR/kubeconfig" admin
    local name
    for name in controller-manager scheduler kubelet kube-proxy coredns; do
        kubeconfig "$DIR/$name.kubeconfig" "$name"
    done
}

configs() {
    local cgroup=$1
    mkdir -p "$DIR/cni/net.d" "$DIR/containerd/certs.d/$REGISTRY" "$DIR/kubelet" "$DIR/registry"
    cat >"$DIR/cni/net.d/10-contrast.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$NETNS",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "isDefaultGateway": true,
      "hairpinMode": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    cat >"$DIR/containerd/config.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$DIR/containerd/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  # The kubelet asks for a negative OOM score for sandboxes; these machines' root may not lower it.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$DIR/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$DIR/containerd/certs.d"
EOF
    cat >"$DIR/containerd/certs.d/$REGISTRY/hosts.toml" <<EOF
server = "http://$REGISTRY"

[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
    cat >"$DIR/registry/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DIR/registry/storage
  delete:
    enabled: true
http:
  addr: $REGISTRY
EOF
    cat >"$DIR/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $DIR/pki/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving.key
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup
containerRuntimeEndpoint: unix://$DIR/containerd/containerd.sock
clusterDomain: cluster.local
clusterDNS: [$DNS_SERVICE_IP]
resolvConf: ""
podLogsDir: /var/log/pods
volumePluginDir: $DIR/kubelet/volume-plugins
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
EOF
    cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $DIR/kube-proxy.kubeconfig
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
    cat >"$DIR/Corefile" <<EOF
cluster.local:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local {
        kubeconfig $DIR/coredns.kubeconfig contrast
        pods insecure
    }
    cache 5
}
EOF
    cat >"$DIR/system.yaml" <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  clusterIP: $DNS_SERVICE_IP
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: contrast-cluster-sh
addressType: IPv4
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
endpoints:
- addresses: [$NODE_IP]
  conditions:
    ready: true
EOF
}

# A DNS query for NAME's A record sent to SERVER:53 (UDP) from inside the namespace; true when the
# answer holds EXPECTED.
dns_answers() { # SERVER NAME EXPECTED
    inns python3 - "$@" <<'EOF'
import socket, struct, sys
server, name, expected = sys.argv[1:]
query = struct.pack(">HHHHHH", 0x2525, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0\x00\x01\x00\x01"
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.settimeout(1)
    s.sendto(query, (server, 53))
    answer = s.recv(4096)
sys.exit(0 if socket.inet_aton(expected) in answer[len(query):] else 1)
EOF
}

up() {
    local bin
    [ "$(id -u)" -eq 0 ] || die "up needs root (network namespace, mounts, cgroups)"
    local missing=()
    for command in containerd containerd-shim-runc-v2 runc docker-registry nsenter openssl python3 iptables; do
        command -v "$command" >/dev/null || missing+=("$command")
    done
    [ -x /usr/lib/cni/bridge ] || missing+=(/usr/lib/cni/bridge)
    [ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]} (bash scripts/system-deps.sh installs them)"
    if [ -f "$DIR/slot" ]; then
        die "$DIR holds a cluster already (bash scripts/cluster.sh down $DIR first)"
    fi
    mkdir -p "$DIR/logs"
    DIR=$(cd "$DIR" && pwd)
    local socket=$DIR/containerd/containerd.sock
    [ ${#socket} -le 100 ] || die "$DIR is too long a path: containerd's socket there would not fit a unix socket address"
    bin=$(build)/bin
    ln -sfn "$bin" "$DIR/bin" # the kubectl of this cluster's version, for the tests and by hand
    local started=$SECONDS
    make_namespace
    SLOT=$(cat "$DIR/slot")
    NETNS=contrast-kc$SLOT
    NODE_IP=198.18.$SLOT.2
    REGISTRY=$NODE_IP:5000
    local cgroup=contrast-kc$SLOT
    network
    pki
    configs "$cgroup"
    mount_namespace
    local hierarchy
    for hierarchy in /sys/fs/cgroup/*/; do
        [ "$hierarchy" = /sys/fs/cgroup/unified/ ] || mkdir -p "$hierarchy$cgroup"
    done
    if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then # a new cpuset holds no CPU until it is given some
        cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$cgroup/cpuset.cpus"
        cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$cgroup/cpuset.mems"
    fi

    start etcd "$bin/etcd" --data-dir "$DIR/etcd" --name contrast \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster contrast=http://127.0.0.1:2380 --log-level warn --unsafe-no-fsync
    start_in_node containerd-supervisor bash "$REPO/scripts/cluster.sh" supervise-containerd "$DIR/containerd/config.toml"
    start registry docker-registry serve "$DIR/registry/config.yml"
    wait_for etcd 30 inns curl -sf http://127.0.0.1:2379/health
    local pki=$DIR/pki
    start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
        --advertise-address "$NODE_IP" --secure-port 6443 --service-cluster-ip-range "$SERVICE_CIDR" \
        --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
        --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$pki/apiserver-kubelet-client.key" --kubelet-certificate-authority "$pki/ca.crt" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$pki/service-account.pub" \
        --service-account-signing-key-file "$pki/service-account.key" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --profiling=false
    wait_for containerd-supervisor 30 test -S "$DIR/containerd/containerd.sock"
    ctr --address "$DIR/containerd/containerd.sock" -n k8s.io images import "$bin/../pause.tar" \
        >"$DIR/logs/pause-import.log" 2>&1 || failed pause-import "ctr images import failed"
    wait_for kube-apiserver 60 "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz
    start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$DIR/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
        --service-account-private-key-file "$pki/service-account.key" --root-ca-file "$pki/ca.crt" \
        --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
        --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
    start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$DIR/scheduler.kubeconfig" \
        --authentication-kubeconfig "$DIR/scheduler.kubeconfig" --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --leader-elect=false --profiling=false
    start_in_node kubelet "$bin/kubelet" --config "$DIR/kubelet/config.yaml" --kubeconfig "$DIR/kubelet.kubeconfig" \
        --root-dir "$DIR/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
    start kube-proxy "$bin/kube-proxy" --config "$DIR/kube-proxy.yaml"
    "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" apply -f "$DIR/system.yaml" >"$DIR/logs/system.log" 2>&1 ||
        failed system "kubectl apply of system.yaml failed"
    start coredns "$bin/coredns" -conf "$DIR/Corefile"
    echo "$REGISTRY" >"$DIR/registry-address"
    wait_for registry 30 curl -sf "http://$REGISTRY/v2/"
    wait_for kubelet 90 "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" wait --for=condition=Ready \
        --timeout=2s "node/$NODE_NAME"
    wait_for coredns 60 dns_answers "$DNS_SERVICE_IP" kubernetes.default.svc.cluster.local "$KUBERNETES_SERVICE_IP"
    wait_for kube-controller-manager 60 "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" -n default get serviceaccount default
    echo "$((SECONDS - started))" >"$DIR/up-seconds"
    echo "cluster.sh: up in $((SECONDS - started)) s: KUBECONFIG=$DIR/kubeconfig, registry $REGISTRY" >&2
}

# --- install-runtime -----------------------------------------------------------------------------

# The node installer's DaemonSet cannot do this here: it writes the host's /etc/containerd and
# restarts containerd through systemd, and this cluster's containerd is our process with its config
# in DIR. So the same installer runs from the host (the node's / is the host's: the launcher goes to
# /opt/edgeless/<handler>/bin, the emulated roots to /var/lib/contrast-emulated-runtime/roots, as a
# DaemonSet would put them) with a target config naming DIR's containerd config, PYTHON as the
# launcher's Python and no restart; the restart is ours.
install_runtime() {
    local platform=$1 python=$2 bin runc log
    [ "$(id -u)" -eq 0 ] || die "install-runtime needs root"
    case "$platform" in
    emulated-snp | emulated-tdx) ;;
    *) die "install-runtime: $platform is not an emulated platform (emulated-snp, emulated-tdx)" ;;
    esac
    [ -f "$DIR/slot" ] || die "$DIR holds no cluster (bash scripts/cluster.sh up $DIR first)"
    DIR=$(cd "$DIR" && pwd)
    [ -x "$python" ] || die "install-runtime: $python is not an executable Python"
    # Absolute, not resolved: a venv's python is a link, and the venv is what has Contrast.
    python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
    "$python" -c 'import contrast' 2>/dev/null || die "install-runtime: $python cannot import contrast"
    runc=$(command -v runc) || die "runc is missing"
    SLOT=$(cat "$DIR/slot")
    NETNS=contrast-kc$SLOT
    bin=$DIR/bin
    log=node-installer-$platform
    printf '{"containerd-config-path": "%s", "systemd-unit-name": "", "emulated-python": "%s", "emulated-runc": "%s"}\n' \
        "${DIR#/}/containerd/config.toml" "$python" "$runc" >"$DIR/node-installer-target.json"
    "$python" -m contrast node-installer --host-root / --platform "$platform" \
        --target-config "$DIR/node-installer-target.json" --no-restart >"$DIR/logs/$log.log" 2>&1 ||
        failed "$log" "contrast node-installer failed"
    # The policy a pod is generated with expects its network namespace where containerd keeps it on
    # a node (/var/run/netns/cni-<uuid>, as every Kata policy does), not under our state folder; down
    # removes the ones of this cluster's pods (netns_of_pods).
    local restart=
    if grep -q '^  netns_mounts_under_state_dir = true$' "$DIR/containerd/config.toml"; then
        sed -i 's/^  netns_mounts_under_state_dir = true$/  netns_mounts_under_state_dir = false/' "$DIR/containerd/config.toml"
        restart=1
    fi
    grep -q "runtime added" "$DIR/logs/$log.log" && restart=1
    if [ -n "$restart" ]; then
        # The shims (and so the pods) outlive containerd; the kubelet reconnects to the new one.
        restart_containerd
        wait_for kubelet 90 "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" wait --for=condition=Ready \
            --timeout=2s "node/$NODE_NAME"
    fi
    "$python" -m contrast runtime --platform "$platform" 2>/dev/null |
        "$python" -c 'import sys, yaml; print(yaml.safe_dump(next(d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "RuntimeClass")))' \
            >"$DIR/runtimeclass-$platform.yaml" || die "install-runtime: no RuntimeClass from contrast runtime"
    "$bin/kubectl" --kubeconfig "$DIR/kubeconfig" apply -f "$DIR/runtimeclass-$platform.yaml" \
        >>"$DIR/logs/$log.log" 2>&1 || failed "$log" "kubectl apply of the RuntimeClass failed"
    echo "cluster.sh: $platform runtime installed, RuntimeClass $(awk '$1 == "name:" { print $2; exit }' "$DIR/runtimeclass-$platform.yaml")" >&2
}

# SIGTERM to containerd; its supervisor starts the next one. Returns when that one answers.
restart_containerd() {
    local old new deadline=$((SECONDS + 30))
    old=$(cat "$DIR/containerd.pid")
    if ours "$old"; then kill -TERM "$old"; fi
    until new=$(cat "$DIR/containerd.pid" 2>/dev/null) && [ "$new" != "$old" ] && running "$new" &&
        ctr --address "$DIR/containerd/containerd.sock" version >/dev/null 2>&1; do
        alive containerd-supervisor || failed containerd-supervisor "exited while restarting containerd"
        [ $SECONDS -lt $deadline ] || failed containerd-supervisor "no new containerd 30 s after SIGTERM to $old"
        sleep 0.2
    done
}

# --- supervise-containerd --------------------------------------------------------------------------

# The supervisor (run by up in the node's namespaces, with its output in logs/containerd-supervisor.log):
# containerd of CONFIG in the foreground of a loop, started again 0.5 s after it exits, its pid
# written atomically to DIR/containerd.pid before each start is awaited. SIGTERM to the supervisor
# (down) stops containerd and then the loop.
supervise_containerd() {
    local config=$1 child= stop=
    trap 'stop=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true' TERM INT
    while [ -z "$stop" ]; do
        containerd --config "$config" &
        child=$!
        echo "$child" >"$DIR/containerd.pid.new"
        mv -f "$DIR/containerd.pid.new" "$DIR/containerd.pid"
        echo "cluster.sh supervisor: containerd started, pid $child" >&2
        local status=0
        # wait returns early when a trapped signal arrives; wait again until the child is gone.
        while running "$child"; do wait "$child" && status=0 || status=$?; done
        echo "cluster.sh supervisor: containerd $child exited ($status)" >&2
        [ -z "$stop" ] || break
        sleep 0.5
    done
}

# --- down ----------------------------------------------------------------------------------------

# True when PID is a process of this cluster (its command line names DIR): pid files may be stale.
ours() {
    tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF "$DIR/"
}

# True while PID runs. A stopped component is a zombie until PID 1, which adopted it when up
# returned, reaps it; kill -0 would count that as running.
running() {
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

stop_pid() {
    local pid=$1 tries
    kill -TERM "$pid" 2>/dev/null || return 0
    for tries in $(seq 100); do
        running "$pid" || return 0
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# The network namespace files of this cluster's pods that are not under DIR: the ones mounted in
# the cluster's mount namespace and not on the host (containerd mounts them there), and those the
# sandboxes' specs name while containerd answers (a cluster made before the mount namespace).
netns_of_pods() {
    local socket=$DIR/containerd/containerd.sock id points
    points='$5 ~ /^\/(var\/)?run\/netns\/cni-/ { print $5 }'
    {
        if [ -e "$(mount_ns)" ]; then
            comm -23 <(nsenter --mount="$(mount_ns)" cat /proc/self/mountinfo 2>/dev/null | awk "$points" | sort -u) \
                <(awk "$points" /proc/self/mountinfo | sort -u)
        fi
        if [ -S "$socket" ]; then
            for id in $(timeout 10 ctr --address "$socket" -n k8s.io containers ls -q 2>/dev/null || true); do
                timeout 10 ctr --address "$socket" -n k8s.io containers info "$id" 2>/dev/null |
                    python3 -c 'import json, sys
for n in json.load(sys.stdin).get("Spec", {}).get("linux", {}).get("namespaces", []):
    if n.get("type") == "network" and n.get("path", "").startswith(("/var/run/netns/cni-", "/run/netns/cni-")):
        print(n["path"])' 2>/dev/null || true
            done
        fi
    } | sort -u
}

# The state folders of the emulated runtimes in DIR's containerd config (install-runtime, or the
# node installer's DaemonSet): each runtime's runc (BinaryName) is its launcher, which exports it.
emulated_states() {
    local config=$DIR/containerd/config.toml launcher
    [ -f "$config" ] || return 0
    sed -n 's/^[[:space:]]*BinaryName[[:space:]]*=[[:space:]]*["'\'']\([^"'\'']*\)["'\''][[:space:]]*$/\1/p' "$config" |
        sort -u | while IFS= read -r launcher; do
            [ -f "$launcher" ] || continue
            sed -n 's/^export CONTRAST_EMULATED_STATE=//p' "$launcher" | sed "s/^'\(.*\)'\$/\1/"
        done | sort -u
}

# The emulated runtime's sandboxes of this cluster's pods: their TEE servers and folders. Their end
# is the runtime's delete, which never comes once the shims are killed, and the TEE server runs in a
# session of its own, outside the pods' cgroups; left alone, they outlived every cluster. A sandbox
# is named by its pause container's id, a task of our containerd; other clusters' stay.
stop_emulated_sandboxes() {
    local state task id sandbox pid
    emulated_states | while IFS= read -r state; do
        [ -d "$state" ] || continue
        for task in "$DIR"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*; do
            [ -d "$task" ] || continue
            id=${task##*/}
            rm -f "$state/containers/$id"
            sandbox=$state/sandboxes/$id
            [ -d "$sandbox" ] || continue
            # Only the process serving this sandbox (its command line names the folder): the pid
            # file may be stale.
            pid=$(cat "$sandbox/tee-server.pid" 2>/dev/null || true)
            if [ -n "$pid" ] && tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qxF "$sandbox"; then
                stop_pid "$pid"
            fi
            rm -rf "$sandbox"
        done
    done
}

down() {
    [ "$(id -u)" -eq 0 ] || die "down needs root"
    [ -d "$DIR" ] || return 0
    DIR=$(cd "$DIR" && pwd)
    local name pid netns
    # The pods' network namespaces outside DIR (install-runtime puts them in /var/run/netns), asked
    # of containerd while it runs.
    netns=$(netns_of_pods)
    # kubelet first, so that it does not restart what is stopped after it; containerd's supervisor
    # before containerd (it stops containerd itself; a containerd left running is stopped next).
    for name in kubelet kube-proxy coredns kube-scheduler kube-controller-manager kube-apiserver registry etcd \
        containerd-supervisor containerd; do
        pid=$(cat "$DIR/$name.pid" 2>/dev/null) || continue
        if ours "$pid"; then stop_pid "$pid"; fi
        rm -f "$DIR/$name.pid"
    done
    # The shims of our containerd, which name its socket, and the sockets they leave when killed:
    # /run/containerd/s/<sha256 of containerd's socket/namespace/sandbox id> (containerd 1.6).
    for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $DIR/containerd/containerd.sock" || true); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    local task
    for task in "$DIR"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*; do
        [ -d "$task" ] || continue
        rm -f "/run/containerd/s/$(printf '%s' "$DIR/containerd/containerd.sock/k8s.io/${task##*/}" |
            sha256sum | cut -c1-64)"
    done
    stop_emulated_sandboxes
    # The containers: every process in the kubelet's cgroup root, then the cgroups themselves.
    local slot cgroup hierarchy
    slot=$(cat "$DIR/slot" 2>/dev/null || true)
    if [ -n "$slot" ]; then
        cgroup=contrast-kc$slot
        local tries
        for tries in $(seq 50); do
            local pids
            pids=$(find /sys/fs/cgroup/pids/"$cgroup" -name cgroup.procs -exec cat {} + 2>/dev/null || true)
            [ -n "$pids" ] || break
            kill -KILL $pids 2>/dev/null || true
            sleep 0.1
        done
        for hierarchy in /sys/fs/cgroup/*/; do
            [ -d "$hierarchy$cgroup" ] || continue
            find "$hierarchy$cgroup" -depth -type d -exec rmdir {} + 2>/dev/null || true
        done
    fi
    # Mounts under DIR (pods' volumes, shm, root file systems, network namespaces), deepest first.
    local target
    for tries in 1 2 3; do
        local targets
        targets=$(awk -v dir="$DIR/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
        [ -n "$targets" ] || break
        for target in $targets; do
            umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
        done
    done
    for target in $netns; do
        umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
        rm -f "$target"
    done
    if [ -n "$slot" ]; then
        ip netns del "contrast-kc$slot" 2>/dev/null || true
        ip link del "kc$slot-host" 2>/dev/null || true
        rm -f /var/lib/cni/results/contrast-kc"$slot"-* 2>/dev/null || true
    fi
    # What was made in DIR, except the logs (they tell why an up failed).
    find "$DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} + 2>/dev/null || true
}

command=${1:-}
case "$command" in
up | down)
    [ $# -eq 2 ] || die "usage: $0 $command DIR"
    DIR=$2
    "$command"
    ;;
build)
    build
    ;;
supervise-containerd)
    [ $# -eq 2 ] || die "usage: $0 supervise-containerd DIR/containerd/config.toml"
    DIR=$(dirname "$(dirname "$2")")
    supervise_containerd "$2"
    ;;
install-runtime)
    [ $# -eq 4 ] || die "usage: $0 install-runtime DIR PLATFORM PYTHON"
    DIR=$2
    install_runtime "$3" "$4"
    ;;
*)
    die "usage: $0 up DIR | down DIR | build | install-runtime DIR PLATFORM PYTHON"
    ;;
esac
