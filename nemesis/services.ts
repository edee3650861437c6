// One service process of the world, started through the harness's launcher (as the tests and the
// benchmark start it): inside its network namespace when there is one, under libfaketime when it is
// installed (its clock then follows a file the nemesis writes: "+0", "+12s", "-5s"), its whole output
// appended to a log file that outlives its kills. SIGKILL and restart, SIGSTOP and SIGCONT.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { launchService, ServiceProcess } from '../harness/launcher';

/** Debian's libfaketime (apt-get install faketime), where its multiarch folder keeps it. */
export const LIBFAKETIME =
  ['x86_64-linux-gnu', 'aarch64-linux-gnu']
    .map((arch) => `/usr/lib/${arch}/faketime/libfaketime.so.1`)
    .find((path) => existsSync(path)) ?? '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';

export function fakeTimeAvailable(): boolean {
  return existsSync(LIBFAKETIME);
}

export interface ServiceSpec {
  name: string;
  /** The folder whose dist/ is started (a planted build lives elsewhere). */
  root: string;
  host: string;
  /** Fixed inside a namespace of its own; a free one otherwise. */
  port?: number;
  prefix: string[];
  env: Record<string, string>;
  dir: string;
  fakeTime: boolean;
}

export class ServiceNode {
  private proc?: ServiceProcess;
  private port?: number;
  /** Times it was started (its incarnations). */
  starts = 0;
  paused = false;
  clockOffsetS = 0;
  readonly logFile: string;
  private readonly clockFile: string;

  constructor(readonly spec: ServiceSpec) {
    this.logFile = join(spec.dir, `${spec.name}.log`);
    this.clockFile = join(spec.dir, `${spec.name}.clock`);
    writeFileSync(this.logFile, '');
    writeFileSync(this.clockFile, '+0\n');
  }

  get name(): string {
    return this.spec.name;
  }

  get url(): string {
    return `http://${this.spec.host}:${this.port ?? this.spec.port ?? 0}`;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  get running(): boolean {
    const c = this.proc?.child;
    return !!c && c.exitCode === null && c.signalCode === null;
  }

  async start(): Promise<void> {
    const clock: Record<string, string> = this.spec.fakeTime
      ? {
          LD_PRELOAD: LIBFAKETIME,
          FAKETIME_TIMESTAMP_FILE: this.clockFile,
          // Read again at most once a second: a jump shows within a second.
          FAKETIME_CACHE_DURATION: '1',
          // Only the wall clock jumps, as when NTP steps it; timers run on the monotonic clock.
          DONT_FAKE_MONOTONIC: '1',
        }
      : {};
    this.starts++;
    this.paused = false;
    this.proc = await launchService({
      env: { ...this.spec.env, ...clock },
      host: this.spec.host,
      port: this.port ?? this.spec.port,
      prefix: this.spec.prefix,
      root: this.spec.root,
      logFile: this.logFile,
      heapMb: 160,
      startTimeoutMs: 180_000,
    });
    this.port = this.proc.port;
    // Read by a check that nothing outlives the run (nemesis/test).
    writeFileSync(join(this.spec.dir, `${this.spec.name}.pid`), String(this.proc.pid));
  }

  /** SIGKILL: no drain, no release of its locks. */
  async kill(): Promise<void> {
    const c = this.proc?.child;
    if (!c || !this.running) return;
    const exited = new Promise((resolve) => c.once('exit', resolve));
    this.proc?.signal('SIGCONT');
    this.proc?.signal('SIGKILL');
    await exited;
    this.paused = false;
  }

  pause(): void {
    if (!this.running) return;
    this.proc?.signal('SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    if (!this.running) return;
    this.proc?.signal('SIGCONT');
    this.paused = false;
  }

  /** Sets the process's wall clock `offsetS` seconds off the real one (a skew, or a jump when it changes). */
  setClock(offsetS: number): void {
    this.clockOffsetS = offsetS;
    writeFileSync(this.clockFile, `${offsetS >= 0 ? '+' : ''}${offsetS}s\n`);
  }

  async stop(): Promise<void> {
    if (!this.proc) return;
    this.proc.signal('SIGCONT');
    await this.proc.stop('SIGTERM');
  }
}
