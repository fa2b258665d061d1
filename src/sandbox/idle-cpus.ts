// How a VM guest's idle CPUs wake up, and the host setting that makes observed syscalls cheaper
// (`airlock setup --poll-idle-cpus`).
//
// Each syscall the host tracer observes stops the program, wakes the tracer, and wakes the program
// again when the tracer lets it go on. In a KVM guest whose cpuidle driver is haltpoll with
// guest_halt_poll_ns = 0, an idle vCPU halts at once, and each of those wake-ups of an idle vCPU
// exits to the hypervisor. On this project's 2-core Firecracker guest (nested virtualization), a
// python program making 20,000 traced opens spent 198-267 µs per open, and 99-102 µs with 200 µs of
// polling (`npm run bench:observed-calls -- --compare-polling`). A trivial run (/bin/true, a handful
// of stops) gained nothing (docs/benchmarks.md). Polling makes
// an idle vCPU spin up to that long before it halts: a host-wide choice, paid with the hypervisor's
// CPU, so Airlock never makes it on its own. doctor reports; setup sets it when root asks. It lasts
// until the next reboot (or until the parameter is written back).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Problem } from '../base/problem.js';

const DRIVER = 'devices/system/cpu/cpuidle/current_driver';
const POLL_NS = 'module/haltpoll/parameters/guest_halt_poll_ns';
/** haltpoll's polling time on this host (what setup writes). */
export const HALTPOLL_PARAM = `/sys/${POLL_NS}`;
/** What setup sets: long enough to cover a traced syscall's round trip on the guest measured. */
export const IDLE_POLL_NS = 200_000;

export interface IdleCpus {
  /** The cpuidle driver (`haltpoll` in a KVM guest that has it), or null when /sys names none. */
  driver: string | null;
  /** haltpoll's guest_halt_poll_ns, or null when the driver is not haltpoll. */
  pollNs: number | null;
}

const read = (path: string): string | null => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
};

/** The idle driver and, under haltpoll, how long an idle vCPU polls before it halts. `sys`: /sys (tests give a folder). */
export function probeIdleCpus(sys = '/sys'): IdleCpus {
  const driver = read(join(sys, DRIVER)) || null;
  const ns = driver === 'haltpoll' ? read(join(sys, POLL_NS)) : null;
  return { driver, pollNs: ns !== null && /^\d+$/.test(ns) ? Number(ns) : null };
}

/** Sets haltpoll's polling to IDLE_POLL_NS (root). `before`: what it was; `already`: it polled at least that long. */
export function pollIdleCpus(sys = '/sys'): { ok: true; already: boolean; before: number } | { ok: false; problem: Problem } {
  if (process.getuid?.() !== 0) return { ok: false, problem: { code: 'SETUP_POLL_NOT_ROOT', message: 'only root can change how idle CPUs wait: run `airlock setup --poll-idle-cpus` as root' } };
  const now = probeIdleCpus(sys);
  if (now.driver !== 'haltpoll' || now.pollNs === null) {
    return { ok: false, problem: { code: 'SETUP_POLL_NOT_HALTPOLL', message: `this host's idle CPUs are not run by haltpoll (cpuidle driver: ${now.driver ?? 'none'}): there is nothing to set; it applies to KVM guests that have it` } };
  }
  if (now.pollNs >= IDLE_POLL_NS) return { ok: true, already: true, before: now.pollNs };
  try {
    writeFileSync(join(sys, POLL_NS), String(IDLE_POLL_NS));
  } catch (e) {
    return { ok: false, problem: { code: 'SETUP_POLL_FAILED', message: `the kernel refused ${POLL_NS}: ${(e as Error).message}` } };
  }
  const after = probeIdleCpus(sys).pollNs;
  if (after !== IDLE_POLL_NS) return { ok: false, problem: { code: 'SETUP_POLL_FAILED', message: `${POLL_NS} reads ${after} after writing ${IDLE_POLL_NS}` } };
  return { ok: true, already: false, before: now.pollNs };
}
