#!/usr/bin/env bash
# Sets up Airlock on a fresh Debian/Ubuntu machine: system packages the sandbox needs (when
# missing), npm dependencies exactly as package-lock.json pins them (`npm ci`), and the build.
# Says what it does at each step and how long it took. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

exec 3>&1 # the terminal (or CI log), for progress lines while a step's own output goes to a file
t0=$SECONDS
step_start=$SECONDS
step() { step_start=$SECONDS; echo "setup: $*"; }
done_step() { echo "setup:   done in $((SECONDS - step_start)) s"; }
# A long command prints nothing for minutes; say every 30 s that it is still working.
with_heartbeat() {
  local what=$1; shift
  ( while sleep 30; do echo "setup:   $what still running ($((SECONDS - step_start)) s)" >&3; done ) &
  local beat=$!
  local rc=0
  "$@" || rc=$?
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  return "$rc"
}

step "checking system packages (bubblewrap, strace, a C/C++ compiler, make, python3)"
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v strace >/dev/null 2>&1 || need+=(strace)
# A C compiler builds the host syscall tracer (native/tracer.c); without it runs fall back to strace.
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
# better-sqlite3 is compiled from source when no prebuilt binary can be downloaded: node-gyp needs these.
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup:   installing ${need[*]} (Debian packages)"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "setup:   all present"
fi
done_step

# node-gyp (better-sqlite3 without a prebuilt binary) needs the Node headers. It downloads them
# unless told where they are; on a machine without that download it fails with a gyp network
# error. Point it at the installed ones: the headers of the running node, or npm's nodedir.
step "finding the Node headers (for a native build)"
node_version=$(node -p process.version)
nodedir=""
for d in "$(npm config get nodedir 2>/dev/null || true)" "$(dirname "$(dirname "$(command -v node)")")" /usr /usr/local; do
  [ -n "$d" ] && [ "$d" != undefined ] && [ -f "$d/include/node/node_version.h" ] || continue
  v=$(sed -n 's/^#define NODE_\(MAJOR\|MINOR\|PATCH\)_VERSION \([0-9]*\).*/\2/p' "$d/include/node/node_version.h" | paste -sd. -)
  if [ "v$v" = "$node_version" ]; then nodedir=$d; break; fi
done
if [ -n "$nodedir" ]; then
  export npm_config_nodedir="$nodedir"
  echo "setup:   $nodedir/include/node ($node_version); a native build uses them (--nodedir)"
else
  echo "setup:   none installed for node $node_version; a native build would download them"
fi
done_step

step "npm ci: the npm packages package-lock.json pins (a few minutes on a fresh machine)"
log=$(mktemp)
if ! with_heartbeat "npm ci" npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
  tail -n 30 "$log" | sed 's/^/  | /'
  echo "setup: npm ci failed (the last lines of its output are above; all of it: $log)."
  if grep -q 'better-sqlite3' "$log"; then
    echo "setup: hint: better-sqlite3 found no prebuilt binary for node $node_version and could not be compiled."
    echo "setup:       It needs a C++ compiler, make, python3 and the Node headers. Install the headers"
    echo "setup:       (Debian/Ubuntu: apt-get install libnode-dev, or the nodejs package from NodeSource)"
    echo "setup:       or point npm at them: npm_config_nodedir=/path/with/include/node ./scripts/setup.sh"
  elif grep -q 'EUSAGE\|in sync' "$log"; then
    echo "setup: hint: package.json and package-lock.json disagree; run npm install once and commit the lock file."
  else
    echo "setup: hint: check the network access to the npm registry ($(npm config get registry))."
  fi
  exit 1
fi
rm -f "$log"
done_step

step "build: tsc, the CLI bundle, the native helpers (tracer, scope agent, pooled sandboxes' launcher)"
with_heartbeat "build" npm run --silent build
done_step

step "the sandbox's host user (root: a system user of its own, airlock-sandbox)"
if [ "$(id -u)" -eq 0 ]; then
  ./bin/airlock setup --sandbox-user | sed 's/^/setup:   /'
else
  echo "setup:   not root: Airlock runs its sandboxes as your own uid (as root: ./bin/airlock setup --sandbox-user)"
fi
done_step

echo "setup: ready in $((SECONDS - t0)) s (./bin/airlock --help, ./bin/airlock doctor)"
