// The nemesis's network: a bridge of its own on this machine and one network namespace per process
// that a fault may cut off (each service process; each Redis Cluster node), joined to the bridge by
// a veth pair. A cut is a rule of the kernel's packet filter (nft) inside the namespace of the
// process cut off, on the address and port of the other end, dropping what goes out, what comes in
// or both; the host's own interfaces and rules are never touched (only the bridge made here). What
// was made is written down first (a file per run under the temp folder), so that a run killed
// before it cleaned up is cleaned up by the next one.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Direction } from './links';

const RECORDS = join(tmpdir(), 'flashsale-nemesis-net');

/** A cut between the process of a namespace and one address:port, one way or both. */
export interface Cut {
  host: string;
  port: number;
  direction: Direction;
}

export interface Namespace {
  name: string;
  /** The namespace's address on the bridge. */
  address: string;
}

/** Runs a command (root), throwing with its stderr. */
function run(cmd: string, args: string[], input?: string): string {
  try {
    return execFileSync(cmd, args, { input, stdio: ['pipe', 'pipe', 'pipe'], encoding: 'utf8' });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')}: ${(e.stderr ?? '').trim() || e.message}`, { cause: err });
  }
}

const quiet = (cmd: string, args: string[]) => {
  try {
    run(cmd, args);
  } catch {
    /* already gone */
  }
};

/**
 * Whether this machine lets the nemesis make namespaces and filter their packets: root, `ip` and
 * `nft` on PATH, and a namespace that can actually be made (a container may forbid it). The reason
 * when not.
 */
export function namespacesAllowed(): { ok: true } | { ok: false; why: string } {
  if (process.getuid?.() !== 0) return { ok: false, why: 'not root' };
  for (const tool of ['ip', 'nft']) {
    try {
      execFileSync(tool, ['-V'], { stdio: 'ignore' });
    } catch {
      return { ok: false, why: `${tool} is not on PATH (Debian: apt-get install iproute2 nftables)` };
    }
  }
  const probe = `nmprobe${process.pid % 100000}`;
  try {
    run('ip', ['netns', 'add', probe]);
    run('ip', ['netns', 'exec', probe, 'nft', 'add', 'table', 'inet', 'probe']);
    run('ip', ['link', 'add', probe, 'type', 'bridge']);
    return { ok: true };
  } catch (err) {
    return { ok: false, why: (err as Error).message };
  } finally {
    quiet('ip', ['link', 'del', probe]);
    quiet('ip', ['netns', 'del', probe]);
  }
}

export class Network {
  readonly bridge: string;
  /** The host's address on the bridge: where the namespaces reach the servers and the nemesis. */
  readonly hostAddress: string;
  private readonly prefix: string;
  private readonly subnet: string;
  private readonly namespaces = new Map<string, Namespace>();
  private readonly cuts = new Map<string, Cut[]>();
  private readonly record: string;

  private constructor(readonly tag: string) {
    this.bridge = `nmb${tag}`;
    this.prefix = `nm${tag}`;
    const n = Number(tag) % 250;
    this.subnet = `10.213.${n}`;
    this.hostAddress = `${this.subnet}.1`;
    this.record = join(RECORDS, `${tag}.json`);
  }

  /** Cleans up what earlier runs left behind (their process gone), then makes this run's bridge. */
  static create(): Network {
    Network.cleanLeftovers();
    const net = new Network(String(process.pid % 10000).padStart(4, '0'));
    net.write();
    run('ip', ['link', 'add', net.bridge, 'type', 'bridge']);
    run('ip', ['addr', 'add', `${net.hostAddress}/24`, 'dev', net.bridge]);
    run('ip', ['link', 'set', net.bridge, 'up']);
    return net;
  }

  /** A namespace joined to the bridge, its loopback up and an empty filter table of the nemesis's. */
  add(name: string): Namespace {
    const index = this.namespaces.size + 10;
    const ns: Namespace = { name: `${this.prefix}-${name}`, address: `${this.subnet}.${index}` };
    this.namespaces.set(name, ns);
    this.write();
    const veth = `nmv${this.tag}${index}`;
    run('ip', ['netns', 'add', ns.name]);
    run('ip', ['link', 'add', veth, 'type', 'veth', 'peer', 'name', `${veth}p`]);
    run('ip', ['link', 'set', `${veth}p`, 'netns', ns.name]);
    run('ip', ['link', 'set', veth, 'master', this.bridge]);
    run('ip', ['link', 'set', veth, 'up']);
    const inside = (...args: string[]) => run('ip', ['netns', 'exec', ns.name, ...args]);
    inside('ip', 'link', 'set', 'lo', 'up');
    inside('ip', 'link', 'set', `${veth}p`, 'name', 'eth0');
    inside('ip', 'addr', 'add', `${ns.address}/24`, 'dev', 'eth0');
    inside('ip', 'link', 'set', 'eth0', 'up');
    this.cuts.set(name, []);
    this.apply(name);
    return ns;
  }

  names(): string[] {
    return [...this.namespaces.values()].map((n) => n.name);
  }

  /** The command prefix that runs a program inside the namespace. */
  exec(name: string): string[] {
    return ['ip', 'netns', 'exec', this.get(name).name];
  }

  get(name: string): Namespace {
    const ns = this.namespaces.get(name);
    if (!ns) throw new Error(`no namespace ${name}`);
    return ns;
  }

  /** Drops the namespace's packets to or from `cut.host:cut.port` (out: what it sends; in: what it receives). */
  cut(name: string, cut: Cut): void {
    (this.cuts.get(name) as Cut[]).push(cut);
    this.apply(name);
  }

  /** Takes back the cuts of the namespace that `which` selects (all when omitted). */
  heal(name: string, which: (c: Cut) => boolean = () => true): void {
    this.cuts.set(
      name,
      (this.cuts.get(name) as Cut[]).filter((c) => !which(c)),
    );
    this.apply(name);
  }

  /** Rewrites the namespace's table from its cuts, in one nft transaction. */
  private apply(name: string): void {
    const rules = (this.cuts.get(name) as Cut[]).flatMap((c) => {
      const out = `add rule inet nemesis out ip daddr ${c.host} tcp dport ${c.port} drop`;
      const back = `add rule inet nemesis in ip saddr ${c.host} tcp sport ${c.port} drop`;
      return c.direction === 'both' ? [out, back] : c.direction === 'out' ? [out] : [back];
    });
    const script = [
      'table inet nemesis {}',
      'delete table inet nemesis',
      'table inet nemesis {',
      '  chain in { type filter hook input priority 0; policy accept; }',
      '  chain out { type filter hook output priority 0; policy accept; }',
      '}',
      ...rules,
      '',
    ].join('\n');
    run('ip', ['netns', 'exec', this.get(name).name, 'nft', '-f', '-'], script);
  }

  /** Removes every namespace (their veths and tables go with them) and the bridge. Safe to call twice. */
  cleanup(): void {
    for (const ns of this.namespaces.values()) quiet('ip', ['netns', 'del', ns.name]);
    this.namespaces.clear();
    quiet('ip', ['link', 'del', this.bridge]);
    rmSync(this.record, { force: true });
  }

  private write(): void {
    mkdirSync(RECORDS, { recursive: true });
    writeFileSync(
      this.record,
      JSON.stringify({
        pid: process.pid,
        bridge: this.bridge,
        namespaces: [...this.namespaces.values()].map((n) => n.name),
      }),
    );
  }

  /** Removes what a run whose process is gone recorded (its namespaces and bridge). */
  private static cleanLeftovers(): void {
    if (!existsSync(RECORDS)) return;
    for (const file of readdirSync(RECORDS)) {
      const path = join(RECORDS, file);
      let left: { pid: number; bridge: string; namespaces: string[] };
      try {
        left = JSON.parse(readFileSync(path, 'utf8')) as typeof left;
      } catch {
        rmSync(path, { force: true });
        continue;
      }
      if (alive(left.pid)) continue;
      for (const ns of left.namespaces) quiet('ip', ['netns', 'del', ns]);
      quiet('ip', ['link', 'del', left.bridge]);
      rmSync(path, { force: true });
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
