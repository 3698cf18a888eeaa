#!/usr/bin/env bash
# Builds verl's Docker images (docker/Dockerfile.cpu, docker/Dockerfile.gpu) with docker or podman.
#   bash scripts/build_image.sh cpu [BASE_IMAGE] [--tag TAG]   default base debian:bookworm-slim, tag verl:cpu
#   bash scripts/build_image.sh gpu [BASE_IMAGE] [--tag TAG]   default base nvidia/cuda:13.0.2-devel-ubuntu24.04, tag verl:gpu
#   options: --engine docker|podman (or VERL_ENGINE=...), --dry-run (print the build command, change nothing)
# The engine is docker when a Docker daemon answers, else podman (apt-installed when missing and run as root).
# On a machine that reaches no image registry (podman only) it also, once:
#   - writes /etc/containers/containers.conf (runc, cgroupfs, ulimits) when there is none;
#   - makes the CPU base itself: debootstrap --variant=minbase bookworm + podman import -> localhost/debian:bookworm.
# With podman, pip inside the build uses the host's pip sources: the CA bundle (HTTPS re-signed on the way out)
# and the local wheel folders, file:// indexes and constraint files of `pip config list`, bind-mounted read-only
# for the build only: no file of them ends up in the image (VERL_HOST_PIP=0: plain PyPI).
# The image is labelled with the verl, torch, vLLM and CUDA versions (ai.verl.*); after the build the script
# checks them against what the image holds (verl.version.describe(), what `verl --version` prints) and prints
# the build time and image size.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[image] $*"; }
die() { echo "[image] error: $*" >&2; exit 1; }

kind="" base="" tag="" engine="${VERL_ENGINE:-}" dry=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    cpu|gpu) [[ -z $kind ]] || die "give one of cpu|gpu"; kind=$1 ;;
    --tag) tag=${2:?--tag needs a value}; shift ;;
    --engine) engine=${2:?--engine needs a value}; shift ;;
    --base) base=${2:?--base needs a value}; shift ;;
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [[ -z $base ]] || die "one base image only (got '$base' and '$1')"; base=$1 ;;
  esac
  shift
done
[[ -n $kind ]] || die "which image? bash scripts/build_image.sh cpu|gpu [BASE_IMAGE] (see --help)"
dockerfile=docker/Dockerfile.$kind
tag=${tag:-verl:$kind}
verl_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' verl/version.py)
[[ -n $verl_version ]] || die "no __version__ in verl/version.py"
arg_default() { sed -n "s/^ARG $1=\(.*\)$/\1/p" "$dockerfile" | head -1; }
SECONDS=0

# --- engine -------------------------------------------------------------------------------------------
if [[ -z $engine ]]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker
  else engine=podman; fi
fi
case "$engine" in docker|podman) ;; *) die "--engine must be docker or podman, not '$engine'" ;; esac
run() { if [[ $dry == 1 ]]; then printf '+'; printf ' %q' "$@"; echo; else "$@"; fi; }

apt_install() {  # apt_install PKG...: the missing ones, as root
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [[ ${#missing[@]} == 0 ]] && return 0
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || die "install ${missing[*]} (needs root and apt-get here)"
  say "apt-get install ${missing[*]}"
  run bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${missing[*]} >/dev/null"
}
if [[ $engine == podman ]] && ! command -v podman >/dev/null 2>&1; then apt_install podman buildah runc; fi
if [[ $engine == docker ]] && ! command -v docker >/dev/null 2>&1; then die "no docker command (try --engine podman)"; fi

registry_host() {  # the registry an image name would be pulled from
  local first=${1%%/*}
  if [[ $1 == */* && ( $first == *.* || $first == *:* || $first == localhost ) ]]; then echo "$first"
  else echo registry-1.docker.io; fi
}
reachable() {  # reachable URL: any HTTP answer (a registry answers 401 without credentials)
  [[ $(curl -s -o /dev/null -m 10 -w '%{http_code}' "$1" 2>/dev/null || true) != 000 ]]
}
image_exists() {
  if [[ $engine == podman ]]; then podman image exists "$1"; else docker image inspect "$1" >/dev/null 2>&1; fi
}

default_base=$(arg_default BASE_IMAGE)
base=${base:-$default_base}
offline=0
if ! image_exists "$base" && ! reachable "https://$(registry_host "$base")/v2/"; then offline=1; fi
if [[ $offline == 1 && $engine == docker ]]; then
  die "base image '$base' is not here and its registry ($(registry_host "$base")) does not answer; load it first (docker load -i ...)"
fi

# --- podman on a machine without a registry: runtime config and a home-made Debian base -----------------
if [[ $offline == 1 ]]; then
  say "no image registry reachable: podman offline setup (runc, containers.conf, a debootstrap base)"
  apt_install podman buildah runc
  conf=/etc/containers/containers.conf
  if [[ ! -f $conf ]]; then
    # crun fails here on rlimits and hybrid cgroups; runc with cgroupfs works; no journald for events.
    hard=$(ulimit -Hn)
    say "writing $conf (runtime runc, cgroupfs, nofile=$hard:$hard)"
    if [[ $dry == 0 ]]; then
      mkdir -p /etc/containers
      cat > "$conf" <<EOF
# Written by verl's scripts/build_image.sh for a machine without a Docker daemon or image registry.
[containers]
default_ulimits = ["nofile=$hard:$hard", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    fi
  else
    say "keeping the existing $conf"
  fi
  if [[ $base == "$default_base" && $kind == cpu ]]; then
    base=localhost/debian:bookworm
    if image_exists "$base"; then
      say "base $base (made earlier with debootstrap)"
    else
      apt_install debootstrap
      mirror=${DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
        | grep -v '^[[:space:]]*#' | grep -o -E 'https?://[^ ]+' | grep -E '/debian/?$' | head -1 || true)}
      mirror=${mirror:-http://deb.debian.org/debian}
      say "making $base: debootstrap --variant=minbase bookworm from $mirror, then podman import"
      t0=$SECONDS
      if [[ $dry == 0 ]]; then
        rootfs=$(mktemp -d /tmp/verl-rootfs.XXXXXX)
        trap 'rm -rf "$rootfs"' EXIT
        debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/tmp/verl-debootstrap.log 2>&1 \
          || { tail -20 /tmp/verl-debootstrap.log >&2; die "debootstrap failed (log: /tmp/verl-debootstrap.log)"; }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$base" >/dev/null
        rm -rf "$rootfs"
        trap - EXIT
      fi
      say "base $base made in $((SECONDS - t0)) s"
    fi
  elif ! image_exists "$base"; then
    die "base image '$base' is not here and no registry answers: load it first (podman load -i ... or podman import), then pass its name"
  fi
fi

# --- build arguments: pins and labels; with podman, the host's pip sources --------------------------------
args=(--build-arg "BASE_IMAGE=$base" --build-arg "VERL_VERSION=$verl_version")
torch_index=$(arg_default TORCH_INDEX_URL)
if [[ -n $torch_index ]] && ! reachable "$torch_index/"; then
  say "$torch_index does not answer: torch must come from the host's pip sources"
  args+=(--build-arg "TORCH_INDEX_URL=")
fi
if [[ $engine == podman && ${VERL_HOST_PIP:-1} != 0 ]]; then
  ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  if [[ -f $ca ]]; then
    args+=(-v "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
  fi
  # Local wheel folders, file:// indexes and constraint files of the host's pip configuration, mounted at the
  # same paths: the build then installs what this machine's pip would, without downloading it again.
  py=$(command -v python3 || true)
  if [[ -n $py ]] && $py -m pip --version >/dev/null 2>&1; then
    while IFS=$'\t' read -r what value; do
      case "$what" in
        mount) args+=(-v "$value:$value:ro") ;;
        arg) args+=(--build-arg "$value") ;;
        note) say "$value" ;;
      esac
    done < <($py - <<'EOF'
import os, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
rank = {":env:": 3, "install": 2, "global": 1}
best = {}
for line in out.splitlines():
    key, _, value = line.partition("=")
    scope, _, name = key.rpartition(".")
    value = value.strip().strip("'\"")
    if name in ("find-links", "extra-index-url", "constraint") and rank.get(scope, 0) >= best.get(name, (0, ""))[0]:
        best[name] = (rank.get(scope, 0), value)
mounts, kept = set(), {}
for name, (_, value) in best.items():
    items = []
    for item in value.split():
        path = item[len("file://"):] if item.startswith("file://") else item
        if not path.startswith("/"):
            items.append(item)  # a URL: the build reaches it as the host does
            continue
        if not os.path.exists(path):
            continue
        # a file:// index (DIR/simple) links to files beside it: mount its parent
        mounts.add(os.path.dirname(path.rstrip("/")) if path.rstrip("/").endswith("/simple") else path)
        items.append(item)
    if items:
        kept[name] = " ".join(items)
for m in sorted(mounts):
    print(f"mount\t{m}")
for name, value in kept.items():
    print(f"arg\tPIP_{name.upper().replace('-', '_')}={value}")
if kept:
    print("note\tpip sources from the host: " + "; ".join(f"{k} {v}" for k, v in kept.items()))
EOF
)
  fi
fi

# --- build -----------------------------------------------------------------------------------------------
say "building $tag from $dockerfile with $engine ($($engine --version 2>/dev/null | head -1)), base $base"
t0=$SECONDS
if [[ $dry == 1 ]]; then run "$engine" build -f "$dockerfile" -t "$tag" "${args[@]}" .; exit 0; fi
# Each output line gets the seconds since the build started. pip's "Location 'file:///...' is ignored" warnings
# (one per package that a host's local index lacks) are noise of the mounted host sources: counted, not shown.
noise="is ignored: it is neither a file nor a directory"
"$engine" build -f "$dockerfile" -t "$tag" "${args[@]}" . 2>&1 | {
  hidden=0
  while IFS= read -r line; do
    if [[ $line == *"$noise"* ]]; then hidden=$((hidden + 1)); continue; fi
    printf '%5d s | %s\n' $((SECONDS - t0)) "$line"
  done
  [[ $hidden == 0 ]] || say "($hidden pip warnings about packages missing from the host's local indexes not shown)"
}
build_s=$((SECONDS - t0))

# --- labels vs contents, size, time ----------------------------------------------------------------------
fmt='{{index .Config.Labels "ai.verl.version"}} {{index .Config.Labels "ai.verl.torch"}} {{index .Config.Labels "ai.verl.vllm"}} {{index .Config.Labels "ai.verl.cuda"}}'
read -r l_verl l_torch l_vllm l_cuda < <($engine image inspect --format "$fmt" "$tag")
labels="verl $l_verl | torch $l_torch | vllm $l_vllm | cuda $l_cuda"
say "labels: $labels"
# describe() reads versions without importing torch: no GPU needed, even for the GPU image.
inside=$($engine run --rm --network none "$tag" python -c "from verl.version import describe; print(describe())" | paste -sd'|' | sed 's/|/ | /g')
say "inside: $inside"
[[ $inside == "$labels" ]] || die "the labels ($labels) differ from what the image holds ($inside)"
size=$($engine image inspect --format '{{.Size}}' "$tag")
say "built $tag in ${build_s} s (this script: ${SECONDS} s in all); image size $(numfmt --to=iec --suffix=B "$size") ($size bytes)"
