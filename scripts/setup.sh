#!/usr/bin/env bash
# Sets up Airlock on a fresh Debian/Ubuntu machine: system packages the sandbox needs (when
# missing), npm dependencies, and the build. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v strace >/dev/null 2>&1 || need+=(strace)
# A C compiler builds the host syscall tracer (native/tracer.c); without it runs fall back to strace.
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} (Debian packages)"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# `npm install` honours package-lock.json; `npm ci` refuses it here because @pydantic/monty lists
# optional per-platform packages that the registry does not serve for every platform.
echo "setup: npm install (from package-lock.json)"
npm install --no-audit --no-fund --loglevel=error
echo "setup: build"
npm run --silent build
echo "setup: done (./bin/airlock --help)"
