// What a person watching a run sees: the program's output as it comes (made safe for a terminal),
// and where the run is. The program's bytes are untrusted: on a terminal, escape sequences could
// rewrite the screen (fake a verdict line, hide text, set the window title...), so they are shown
// as text there. A pipe or file gets the bytes as they are.
import { createInterface } from 'node:readline/promises';
import type { RunEvent } from '../sandbox/types.js';

/** C0 controls but \t \n \r, DEL and C1 controls, shown as \xNN (ESC becomes \x1b: visible, inert). */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u0080-\u009f]/g;
export const forTerminal = (text: string): string => text.replace(UNSAFE, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

export interface Watcher {
  onEvent: (e: RunEvent) => void;
  /** Clears the status line (before the summary is printed). */
  done: () => void;
}

/**
 * `live`: the program's stdout and stderr go to ours as they come. `status`: on a terminal, one
 * line on stderr with the phase and the elapsed time, redrawn in place (nothing when stderr is not a
 * terminal, so logs and pipes stay clean).
 */
export function watchRun(opts: { live: boolean; status: boolean; label: string }): Watcher {
  const tty = { out: process.stdout.isTTY === true, err: process.stderr.isTTY === true };
  const showStatus = opts.status && tty.err;
  const t0 = Date.now();
  let phase = 'starting';
  let drawn = false;
  let atLineStart = true;
  const clear = (): void => {
    if (drawn) process.stderr.write('\r\x1b[2K');
    drawn = false;
  };
  const draw = (): void => {
    if (!showStatus || !atLineStart) return;
    clear();
    process.stderr.write(`airlock: ${opts.label}: ${phase} ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    drawn = true;
  };
  const timer = showStatus ? setInterval(draw, 200) : null;
  timer?.unref();
  const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  const write = (stream: 'stdout' | 'stderr', chunk: Buffer): void => {
    const target = stream === 'stdout' ? process.stdout : process.stderr;
    clear();
    if (tty[stream === 'stdout' ? 'out' : 'err']) {
      const text = forTerminal(decoders[stream].decode(chunk, { stream: true }));
      target.write(text);
      if (text.length > 0) atLineStart = text.endsWith('\n');
    } else target.write(chunk);
  };
  return {
    onEvent(e) {
      if (e.kind === 'phase') {
        phase = e.phase === 'running' ? 'running' : e.phase;
        draw();
      } else if (e.kind === 'output' && opts.live) write(e.stream, e.chunk);
      else if (e.kind === 'dropped' && opts.live) {
        clear();
        process.stderr.write(`\nairlock: ${e.stream} past ${e.afterBytes} bytes is not shown (the host counts and hashes all of it; raise limits.stdout_kb to keep more)\n`);
        atLineStart = true;
      }
    },
    done() {
      if (timer) clearInterval(timer);
      clear();
      if (opts.live && !atLineStart) process.stderr.write('\n');
    },
  };
}

/**
 * Ctrl-C (and SIGTERM) end the run through `abort` instead of killing Airlock mid-way, so the
 * sandbox is killed, its mounts and cgroup are removed and the run is recorded as interrupted. A
 * second Ctrl-C exits at once (what is left is swept by the next airlock process).
 */
export function interruptible(onFirst: () => void): { signal: AbortSignal; release: () => void } {
  const ac = new AbortController();
  const handler = (sig: NodeJS.Signals): void => {
    if (ac.signal.aborted) process.exit(130);
    process.stderr.write(`\nairlock: ${sig === 'SIGINT' ? 'Ctrl-C' : sig}: ending the sandbox (again to quit at once)\n`);
    onFirst();
    ac.abort();
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return {
    signal: ac.signal,
    release() {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}

/**
 * Asks a person `question` and waits for y/N on the terminal: `yes` only for y or yes. With no
 * terminal on stdin nobody can be asked (`no-terminal`): the caller refuses, and says --yes is the
 * way for a script.
 */
export async function askYesNo(question: string, output: NodeJS.WritableStream = process.stdout): Promise<'yes' | 'no' | 'no-terminal'> {
  if (!process.stdin.isTTY) return 'no-terminal';
  const rl = createInterface({ input: process.stdin, output });
  const answer = await rl.question(`${question} [y/N] `);
  rl.close();
  return /^y(es)?$/i.test(answer.trim()) ? 'yes' : 'no';
}
