// Every host-side read and write inside a scope goes through this client of native/scopefs.c: one
// process per scope, started as root, that opens the scope root from "/" without following links
// at any component, drops to the uid/gid/groups of the root's owner (no capabilities, no_new_privs;
// a root-owned scope keeps only CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH and FOWNER), and then walks
// every relative path one component at a time from that descriptor (openat2 RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, or O_NOFOLLOW with a device check on older kernels),
// refusing links, mount points and directories that changed inode since first seen.
// Why a native process: Node's fs takes paths only, so every call would resolve every component
// again, and the scope's owner could swap any of them between two calls (docs/promotion.md).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { join } from 'node:path';
import { constants } from 'node:os';
import { nativeBinaryPath } from './native.js';
import { ownedTempDir } from './owner.js';

export type EntryType = 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'char-device' | 'block-device';

/** What lstat says of an entry, as the agent saw it through its descriptor walk. */
export interface EntryStat {
  type: EntryType;
  /** Permission bits (& 0o7777). */
  mode: number;
  uid: number;
  gid: number;
  size: number;
  nlink: number;
  /** `dev:ino`: the inode; what directory pins and a directory's removal compare. */
  ident: string;
  /** `dev:ino:ctime_sec:ctime_nsec:size`: a file as it was read; an in-place edit since changes it. */
  version: string;
  mtime: { sec: number; nsec: number };
  atime: { sec: number; nsec: number };
}

/** A refusal or failure of the agent: errno's name (ELOOP: a link; ESTALE: an entry was swapped...). */
export class ScopeFsError extends Error {
  constructor(
    readonly errno: string,
    message: string,
    readonly rel: string,
  ) {
    super(message);
  }
}

const TYPES: Record<string, EntryType> = { f: 'file', d: 'dir', l: 'symlink', p: 'fifo', s: 'socket', c: 'char-device', b: 'block-device' };
const ERRNO_NAMES = new Map(Object.entries(constants.errno).map(([k, v]) => [v, k]));
const hex = (s: string): string => (s === '' ? '-' : Buffer.from(s, 'utf8').toString('hex'));
const unhex = (h: string): string => Buffer.from(h, 'hex').toString('utf8');

function parseStat(f: string[]): EntryStat {
  const n = (i: number): number => Number(f[i]);
  return {
    type: TYPES[f[0] ?? ''] ?? 'file',
    mode: parseInt(f[1] ?? '0', 8),
    uid: n(2),
    gid: n(3),
    size: n(4),
    nlink: n(5),
    ident: `${f[6]}:${f[7]}`,
    version: `${f[6]}:${f[7]}:${f[12]}:${f[13]}:${f[4]}`,
    mtime: { sec: n(8), nsec: n(9) },
    atime: { sec: n(10), nsec: n(11) },
  };
}

export const scopeFsBinaryPath = (): string | null => nativeBinaryPath('airlock-scopefs');

/**
 * While it waits for an answer, the host looks at the agent every AGENT_IDLE_MS without a byte from
 * it: an agent found stopped (SIGSTOP, SIGTSTP...: the agent runs as the scope's owner, who may send
 * them), or waiting on a FUSE file system (a user process serves it, and may never answer), is killed
 * and the request fails. Without this a promotion waited forever, holding the workspace's commit
 * lock (every promote, rollback and recover of every scope refused), and a run never started. An
 * agent that is working (a big write to a slow disk, an fsync) is left alone.
 */
export const AGENT_IDLE_MS = 10_000;

const readProc = (pid: number, name: string): string => {
  try {
    return readFileSync(`/proc/${pid}/${name}`, 'utf8');
  } catch {
    return '';
  }
};

/**
 * Why an agent that sent nothing for AGENT_IDLE_MS will never answer, or null (it may be working).
 * A FUSE wait shows in its wchan (the kernel function it sleeps in: request_wait_answer, fuse_*);
 * where the kernel hides wchan (kptr_restrict, not root) it reads "0" and only a stop is caught.
 */
export function agentStuck(pid: number): string | null {
  const stat = readProc(pid, 'stat');
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  const idle = `${AGENT_IDLE_MS / 1000} s without an answer`;
  if (state === 'T' || state === 't') return `found stopped after ${idle} (signalled by the scope's owner?)`;
  if (/^(request_wait_answer|fuse_)/.test(readProc(pid, 'wchan'))) return `waiting on a FUSE file system after ${idle} (a user process serves it, and may never answer: the scope's owner?)`;
  return null;
}

/** Bytes arriving from the agent, read as lines and as counted byte runs. */
class ByteReader {
  // Chunks as they came (never concatenated on arrival: a long line would cost quadratic time).
  private chunks: Buffer[] = [];
  private size = 0;
  /** Bytes at the front already known to hold no newline. */
  private scanned = 0;
  private wake: (() => void) | null = null;
  ended: string | null = null;

  /** `onIdle`: called after AGENT_IDLE_MS without a byte while waiting; a reason ends the wait. */
  constructor(private readonly onIdle: () => string | null) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    this.wake?.();
  }

  end(why: string): void {
    this.ended ??= why;
    this.wake?.();
  }

  private async more(): Promise<void> {
    if (this.ended !== null) throw new ScopeFsError('EPIPE', `the scope agent stopped (${this.ended})`, '');
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((r) => {
      this.wake = r;
      const look = (): void => {
        const why = this.onIdle();
        if (why === null) timer = setTimeout(look, AGENT_IDLE_MS);
        else this.end(why);
      };
      timer = setTimeout(look, AGENT_IDLE_MS);
    });
    clearTimeout(timer);
    this.wake = null;
  }

  /** The first n bytes, removed from the front. */
  private take(n: number): Buffer {
    const parts: Buffer[] = [];
    let need = n;
    while (need > 0) {
      const c = this.chunks[0] as Buffer;
      if (c.length <= need) {
        parts.push(c);
        this.chunks.shift();
        need -= c.length;
      } else {
        parts.push(c.subarray(0, need));
        this.chunks[0] = c.subarray(need);
        need = 0;
      }
    }
    this.size -= n;
    this.scanned = 0;
    return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, n);
  }

  /** Offset of the first newline, scanning only bytes not scanned before; -1 when there is none yet. */
  private newline(): number {
    let base = 0;
    for (const c of this.chunks) {
      if (base + c.length > this.scanned) {
        const at = c.indexOf(10, Math.max(0, this.scanned - base));
        if (at >= 0) return base + at;
      }
      base += c.length;
    }
    this.scanned = this.size;
    return -1;
  }

  async line(): Promise<string> {
    for (;;) {
      const nl = this.newline();
      if (nl >= 0) return this.take(nl + 1).subarray(0, nl).toString('utf8');
      await this.more();
    }
  }

  async bytes(n: number): Promise<Buffer> {
    while (this.size < n) await this.more();
    return this.take(n);
  }
}

export interface WriteOptions {
  mode: number;
  /** Group to give the file (the owner must belong to it); omitted: the agent's own. */
  gid?: number;
  atime?: { sec: number; nsec: number };
  mtime?: { sec: number; nsec: number };
  /** null: the name must be free; else the `ident` of the file it replaces (swapped atomically). */
  expect: string | null;
}

export interface OpenScopeFs {
  /** The scope itself: the directory, or a one-file scope's parent directory. */
  root: EntryStat;
  /** The uid/gid the agent now acts as (the root's owner when Airlock runs as root). */
  authority: { uid: number; gid: number };
  /** openat2, or nofollow (per-component O_NOFOLLOW walk) on kernels without openat2. */
  walk: 'openat2' | 'nofollow';
  /** A path that reaches the scope root through the agent's descriptor (for an overlay's lowerdir). */
  rootByDescriptor: string;
}

/** A connection to the agent server and its forked session, which has sent its pid and waits for a path. */
interface Session {
  conn: Socket;
  reader: ByteReader;
  /** The session's pid: known once its first line came (`pid <pid>`), then its own until reaped. */
  pid: Promise<number>;
}

/**
 * The agents' parent: one `airlock-scopefs --serve` per Node process, started on first use, that
 * forks a session per connection (a fork of a small C process costs far less than a spawn from a
 * large Node process: this is most of what a scope adds to a run). Its socket is in a fresh 0700
 * folder of ours, so only this process (and root) can connect. A session's pid stays its own until
 * we tell the server to reap it (`R <pid>`), which we do only after killing it.
 *
 * After a session ends, one more is connected ahead of need: its fork, connection and first line are
 * then off the next scope's path (a run's scopes are opened while its sandbox is staged). It waits as
 * root, as every session does until it has opened its path, on a socket only this process holds.
 */
class AgentServer {
  private static current: Promise<AgentServer> | null = null;
  private spare: Session | null = null;
  private closed = false;

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    readonly socket: string,
  ) {}

  static get(bin: string): Promise<AgentServer> {
    AgentServer.current ??= AgentServer.start(bin).catch((e: unknown) => {
      AgentServer.current = null;
      throw e;
    });
    return AgentServer.current;
  }

  private static async start(bin: string): Promise<AgentServer> {
    const dir = ownedTempDir('scopefs');
    const socket = join(dir, 's');
    const child = spawn(bin, ['--serve', hex(socket)], { stdio: ['pipe', 'pipe', 'pipe'], env: {} });
    const reader = new ByteReader(() => null);
    let server: AgentServer | undefined;
    child.stdout.on('data', (d: Buffer) => reader.push(d));
    child.on('error', (e) => reader.end(e.message));
    child.on('close', (code, sig) => {
      reader.end(`exit ${code ?? sig}`);
      AgentServer.current = null;
      server?.dropSpare();
      rmSync(dir, { recursive: true, force: true });
    });
    child.stdin.on('error', () => undefined);
    child.stderr.resume();
    const first = (await reader.line()).split(' ');
    if (first[0] !== 'ok') {
      child.kill('SIGKILL');
      throw errorOf(first, '');
    }
    child.stdout.removeAllListeners('data');
    child.stdout.resume();
    // The server must not keep Node alive; it ends when our end of its stdin closes (Node exits).
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as Socket).unref();
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    return (server = new AgentServer(child, socket));
  }

  /** A session for the next scope: the one connected ahead of need when it is still there, else a new one. */
  session(): Session {
    const spare = this.spare;
    this.spare = null;
    if (spare && spare.reader.ended === null) return spare;
    if (spare) this.end(spare);
    return this.connect();
  }

  /** Connects one session ahead of need, unless one waits already. */
  keepSpare(): void {
    if (this.spare || this.closed) return;
    this.spare = this.connect();
    // Neither a connected spare nor its server may keep Node alive.
    this.spare.conn.unref();
  }

  private connect(): Session {
    const conn = createConnection(this.socket);
    const known = { pid: 0 };
    const reader = new ByteReader(() => {
      const why = known.pid ? agentStuck(known.pid) : null;
      if (why === null) return null;
      kill(known.pid);
      return `${why}: killed`;
    });
    conn.on('data', (d: Buffer) => reader.push(d));
    conn.on('error', (e) => reader.end(e.message));
    conn.on('close', () => reader.end('its connection closed'));
    const pid = reader.line().then((line) => {
      const f = line.split(' ');
      const n = Number(f[1]);
      if (f[0] !== 'pid' || !Number.isSafeInteger(n) || n <= 0) throw new ScopeFsError('EPROTO', `the scope agent server answered ${JSON.stringify(line)} instead of its session's pid`, '');
      return (known.pid = n);
    });
    pid.catch(() => undefined); // awaited by open(), or by end(): each destroys the connection on failure
    return { conn, reader, pid };
  }

  /** Ends a session that will not be used: killed, then reaped by the server (once its pid is known). */
  private end(s: Session): void {
    s.conn.destroy();
    s.pid.then((pid) => {
      kill(pid);
      this.reap(pid);
    }, () => undefined);
  }

  private dropSpare(): void {
    this.closed = true;
    if (this.spare) this.spare.conn.destroy();
    this.spare = null;
  }

  /** Lets the server reap a session we have killed. */
  reap(pid: number): void {
    this.child.stdin.write(`R ${pid}\n`);
  }
}

/** One agent per scope; requests are answered in order, one at a time. */
export class ScopeFs implements OpenScopeFs {
  private queue: Promise<unknown> = Promise.resolve();
  private ended = false;

  private constructor(
    private readonly conn: Socket,
    private readonly server: AgentServer,
    private pid: number,
    private readonly reader: ByteReader,
    readonly root: EntryStat,
    readonly authority: { uid: number; gid: number },
    readonly walk: 'openat2' | 'nofollow',
    readonly rootByDescriptor: string,
    /** The groups the agent may give a file it writes (its gid and supplementary groups). */
    readonly groups: readonly number[],
  ) {
    conn.on('close', () => (this.ended = true));
  }

  /**
   * Whether a file the agent writes can be given group `gid`: a group of the scope's owner, or any
   * group in a root-owned scope (the agent keeps CAP_CHOWN there).
   */
  maySetGroup(gid: number): boolean {
    return this.authority.uid === 0 || this.groups.includes(gid);
  }

  /**
   * Starts the agent on `absPath` (a directory scope, or a one-file scope whose root is its parent).
   * Refuses (ScopeFsError) a path with a link or a non-directory anywhere on the way.
   */
  static async open(absPath: string, kind: 'dir' | 'file'): Promise<ScopeFs> {
    const bin = scopeFsBinaryPath();
    if (!bin) throw new ScopeFsError('ENOENT', 'the scope agent (dist/native/airlock-scopefs) is not built: run `npm run build` with a C compiler (apt-get install gcc libc6-dev)', '');
    const server = await AgentServer.get(bin);
    const { conn, reader, pid: pidKnown } = server.session();
    conn.ref(); // a spare was unref'd while it waited
    conn.write(`${hex(absPath)} ${kind}\n`);
    const pid = await pidKnown.catch((e: unknown) => {
      conn.destroy();
      throw e;
    });
    try {
      // ok hello <walk> <uid> <gid> <root fd> <pid> <stat: 14 fields> <groups: gid,gid,...>
      const hello = (await reader.line()).split(' ');
      if (hello[0] !== 'ok') throw errorOf(hello, absPath);
      const groups = (hello[21] ?? hello[4] ?? '').split(',').map(Number);
      return new ScopeFs(conn, server, pid, reader, parseStat(hello.slice(7, 21)), { uid: Number(hello[3]), gid: Number(hello[4]) }, hello[2] === 'openat2' ? 'openat2' : 'nofollow', `/proc/${pid}/fd/${hello[5]}`, groups);
    } catch (e) {
      conn.destroy();
      kill(pid);
      server.reap(pid);
      throw e;
    }
  }

  private request<T>(line: string, body: Buffer | null, read: () => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      // Closed (or its connection ended): nothing can answer, and bytes still buffered belong to an
      // answer abandoned part way (see `chunks`), never to this request.
      if (this.ended) throw new ScopeFsError('EPIPE', 'the scope agent stopped (closed, or its connection ended)', '');
      this.conn.write(line + '\n');
      if (body) {
        for (let off = 0; off < body.length; off += 1 << 20) {
          const part = body.subarray(off, off + (1 << 20));
          this.conn.write(`${part.length}\n`);
          this.conn.write(part);
        }
        this.conn.write('0\n');
      }
      return read();
    };
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    return p;
  }

  private async answer(rel: string): Promise<string[]> {
    const f = (await this.reader.line()).split(' ');
    if (f[0] !== 'ok') throw errorOf(f, rel);
    return f.slice(1);
  }

  /** lstat of `rel` ('' = the root); null when absent. */
  stat(rel: string): Promise<EntryStat | null> {
    return this.request(`S ${hex(rel)}`, null, async () => {
      const f = await this.answer(rel);
      return f[0] === '-' ? null : parseStat(f);
    });
  }

  /** A regular file's bytes (never through a link) and the stat of what was read. */
  read(rel: string, maxBytes = 1 << 30): Promise<{ stat: EntryStat; bytes: Buffer }> {
    return this.request(`R ${hex(rel)} ${maxBytes}`, null, async () => {
      const stat = parseStat(await this.answer(rel));
      const parts: Buffer[] = [];
      await this.chunks((b) => parts.push(Buffer.from(b)));
      return { stat, bytes: Buffer.concat(parts) };
    });
  }

  /**
   * A regular file's sha256 (streamed: memory stays bounded) and its stat. `check` (a deadline) runs
   * before every chunk; what it throws abandons the read and ends this agent (see `chunks`).
   */
  hash(rel: string, check?: () => void): Promise<{ stat: EntryStat; sha256: string }> {
    return this.request(`R ${hex(rel)} ${Number.MAX_SAFE_INTEGER}`, null, async () => {
      const stat = parseStat(await this.answer(rel));
      const h = createHash('sha256');
      await this.chunks((b) => h.update(b), check);
      return { stat, sha256: h.digest('hex') };
    });
  }

  /**
   * A regular file's bytes handed to `each` chunk by chunk (memory stays bounded), and the stat of
   * what was read. An error thrown by `each` is thrown once the answer has been read to its end (the
   * next request must not start in the middle of this one). `check` runs before every chunk; what
   * it throws abandons the read and ends this agent (see `chunks`).
   */
  stream(rel: string, each: (b: Buffer) => void, check?: () => void): Promise<EntryStat> {
    return this.request(`R ${hex(rel)} ${Number.MAX_SAFE_INTEGER}`, null, async () => {
      const stat = parseStat(await this.answer(rel));
      let failed: { e: unknown } | null = null;
      await this.chunks((b) => {
        if (failed) return;
        try {
          each(b);
        } catch (e) {
          failed = { e };
        }
      }, check);
      if (failed) throw (failed as { e: unknown }).e;
      return stat;
    });
  }

  /**
   * Reads an answer's chunks. `check` runs before each: a file of many GiB (a sparse one costs its
   * owner nothing) takes the agent minutes to send, so a deadline checked only between requests does
   * not bound it. The rest of the answer cannot be skipped without reading it, so when `check` throws
   * the agent is ended (close(): every later request of this ScopeFs fails) and its error thrown.
   */
  private async chunks(each: (b: Buffer) => void, check?: () => void): Promise<void> {
    for (;;) {
      try {
        check?.();
      } catch (e) {
        this.close();
        throw e;
      }
      const n = Number(await this.reader.line());
      if (!Number.isSafeInteger(n) || n < 0) throw new ScopeFsError('EPROTO', 'the scope agent sent a broken frame', '');
      if (n === 0) return;
      each(await this.reader.bytes(n));
    }
  }

  /** Names in a directory. */
  list(rel: string): Promise<string[]> {
    return this.request(`L ${hex(rel)}`, null, async () =>
      (await this.answer(rel))
        .filter((x) => x !== '')
        .map((h) => {
          // Decoded, a name that is not valid UTF-8 names no file (or another one): refused, never guessed.
          if (!isUtf8(Buffer.from(h, 'hex'))) throw new ScopeFsError('EILSEQ', `a name that is not valid UTF-8 (bytes ${h}) in ${rel || '.'}: it cannot be named as it is`, rel);
          return unhex(h);
        }),
    );
  }

  /** A symbolic link's target text (the link is read, never followed). */
  readlink(rel: string): Promise<string> {
    return this.request(`K ${hex(rel)}`, null, async () => unhex((await this.answer(rel))[0] ?? ''));
  }

  /** Writes a regular file: staged as `stage` beside it, fsync'd, then put in place atomically. */
  write(rel: string, stage: string, bytes: Buffer, o: WriteOptions): Promise<EntryStat> {
    const t = (x?: { sec: number; nsec: number }): string => (x ? `${x.sec} ${x.nsec}` : '-1 0');
    const line = `W ${hex(rel)} ${hex(stage)} ${o.mode.toString(8)} ${o.gid ?? '-'} ${t(o.atime)} ${t(o.mtime)} ${o.expect ?? '-'}`;
    return this.request(line, bytes, async () => parseStat(await this.answer(rel)));
  }

  mkdir(rel: string, mode: number, gid?: number): Promise<EntryStat> {
    return this.request(`M ${hex(rel)} ${mode.toString(8)} ${gid ?? '-'}`, null, async () => parseStat(await this.answer(rel)));
  }

  /** chmod, then chgrp (never chmod after a chown), of the entry whose ident is `expect`. */
  chmod(rel: string, mode: number, gid: number | undefined, expect: string): Promise<EntryStat> {
    return this.request(`C ${hex(rel)} ${mode.toString(8)} ${gid ?? '-'} ${expect}`, null, async () => parseStat(await this.answer(rel)));
  }

  unlink(rel: string, expect: string): Promise<void> {
    return this.request(`U ${hex(rel)} ${expect}`, null, async () => void (await this.answer(rel)));
  }

  rmdir(rel: string, expect: string): Promise<void> {
    return this.request(`D ${hex(rel)} ${expect}`, null, async () => void (await this.answer(rel)));
  }

  fsync(rel: string): Promise<void> {
    return this.request(`F ${hex(rel)}`, null, async () => void (await this.answer(rel)));
  }

  /** From now on the directory at `rel` must be the inode `ident` (e.g. as a journal recorded it). */
  pin(rel: string, ident: string): Promise<void> {
    return this.request(`P ${hex(rel)} ${ident}`, null, async () => void (await this.answer(rel)));
  }

  /**
   * The agent's connection is open, so it has not exited; and its pid stays its own (alive or a
   * zombie) until close() has the server reap it: no other process can have it meanwhile, and
   * /proc/<pid>/fd/N (rootByDescriptor) still names the agent's descriptor while this is true.
   */
  get running(): boolean {
    return !this.ended;
  }

  close(): void {
    if (this.pid === 0) return;
    this.ended = true;
    this.conn.destroy();
    kill(this.pid);
    this.server.reap(this.pid);
    this.pid = 0;
    // After what the caller does next in this turn (a run's result goes up first).
    setImmediate(() => this.server.keepSpare());
  }
}

/** SIGKILL to a session that has not been reaped yet (its pid cannot be anyone else's). */
function kill(pid: number | undefined): void {
  try {
    if (pid) process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

function errorOf(f: string[], rel: string): ScopeFsError {
  const errno = Number(f[1]);
  return new ScopeFsError(ERRNO_NAMES.get(errno) ?? `E${errno}`, f[2] ? unhex(f[2]) : `errno ${errno}`, rel);
}
