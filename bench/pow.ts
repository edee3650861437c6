/// <reference lib="dom" />
// eslint-disable-next-line @typescript-eslint/triple-slash-reference -- bench/tsconfig.json does not include src/types
/// <reference path="../src/types/altcha-lib.d.ts" />
// `npm run bench:pow`: what proof of work costs on this machine, without load on the service: the
// server's verification of one join's solution and the issue of a challenge (µs each), and the
// time the waiting page's own solver takes in headless Chromium at each difficulty step.
import { readFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { solveChallenge } from 'altcha-lib/v1';
import { chromium } from 'playwright-core';
import { challengeParams, decodeSolution, makeChallenge, verifyProof } from '../src/proof-of-work/proof-verification';
import { readFlags, RESULTS_DIR, runMain, writeResults } from './standalone';

const KEY = 'a-proof-of-work-key-for-the-benchmark-0123';
const DEFAULT_STEPS = [20_000, 60_000, 200_000, 600_000];

/** A challenge as the service makes one (product 1, no user, valid a minute). */
const issue = (maxNumber: number) =>
  makeChallenge(
    KEY,
    maxNumber,
    new Date(Date.now() + 60_000),
    challengeParams({ productId: 1, userId: null, maxNumber }),
  );

async function verification(rounds: number) {
  const maxNumber = DEFAULT_STEPS[0];
  const c = issue(maxNumber);
  const s = await solveChallenge(c.challenge, c.salt, c.algorithm, maxNumber).promise;
  const header = Buffer.from(JSON.stringify({ ...c, number: s!.number })).toString('base64');
  const once = () => {
    const v = verifyProof(decodeSolution(header)!, KEY, {
      productId: 1,
      userId: 'u',
      bound: false,
      minMaxNumber: maxNumber,
      now: Date.now(),
    });
    if (!v.ok) throw new Error(v.why);
  };
  const usEach = (n: number, fn: () => unknown) => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) fn();
    return Number(process.hrtime.bigint() - t0) / n / 1000;
  };
  usEach(1000, once); // warm-up
  return { verifyUs: usEach(rounds, once), issueUs: usEach(rounds / 4, () => issue(maxNumber)) };
}

function chromiumPath(): string {
  const found = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].find(
    (p) => p && existsSync(p),
  );
  if (!found) throw new Error("no Chromium: install Debian's chromium package or set CHROMIUM_PATH");
  return found;
}

async function solving(steps: number[], samples: number) {
  // The page's solver and altcha-lib's worker, served as the service serves them.
  const solverDir = join(dirname(require.resolve('altcha-lib/v1')), '..', '..', 'esm', 'v1');
  const files: Record<string, string> = {
    '/wait/assets/solver.js': join(__dirname, '..', 'src', 'wait-page', 'page', 'solver.js'),
    '/wait/assets/worker.js': join(solverDir, 'worker.js'),
    '/wait/assets/index.js': join(solverDir, 'index.js'),
    '/wait/assets/helpers.js': join(solverDir, 'helpers.js'),
  };
  const server = http.createServer((req, res) => {
    const file = files[req.url ?? ''];
    if (req.url === '/')
      return void res.setHeader('content-type', 'text/html').end('<!doctype html><title>pow</title>');
    if (!file) return void res.writeHead(404).end();
    res.setHeader('content-type', 'text/javascript');
    res.end(readFileSync(file));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const browser = await chromium.launch({
    executablePath: chromiumPath(),
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    // (A module script: the evaluated functions below are compiled to CommonJS, which has no import().)
    await page.addScriptTag({
      type: 'module',
      content: "import { solve } from '/wait/assets/solver.js'; window.solve = solve;",
    });
    await page.waitForFunction(() => typeof (window as unknown as { solve?: unknown }).solve === 'function');
    const workers = await page.evaluate(() => Math.min(4, navigator.hardwareConcurrency || 2));
    const out = [];
    for (const maxNumber of steps) {
      const times: number[] = [];
      for (let i = 0; i < samples; i++) {
        const ms = await page.evaluate(
          async (ch) => {
            const { solve } = window as unknown as { solve: (c: unknown) => Promise<number> };
            const t0 = performance.now();
            await solve(ch);
            return performance.now() - t0;
          },
          { ...issue(maxNumber), maxnumber: maxNumber },
        );
        times.push(Math.round(ms));
      }
      const sorted = [...times].sort((x, y) => x - y);
      out.push({
        maxNumber,
        samples: times,
        medianMs: sorted[Math.floor(sorted.length / 2)],
        meanMs: Math.round(times.reduce((s, t) => s + t, 0) / times.length),
        p90Ms: sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.9) - 1)],
      });
      process.stdout.write(`  step ${out.length - 1} (${maxNumber}): median ${out.at(-1)!.medianMs} ms\n`);
    }
    return { workers, steps: out };
  } finally {
    await browser.close();
    server.close();
  }
}

async function main(): Promise<void> {
  const flags = readFlags(
    ['steps', 'samples', 'rounds', 'out'],
    `npm run bench:pow -- [--steps N,N,... (${DEFAULT_STEPS.join(',')})] [--samples N (15)] [--rounds N (20000)] [--out DIR (bench/results)]`,
  );
  if (!flags) return;
  const samples = Number(flags.samples ?? 15);
  process.stdout.write('verification…\n');
  const v = await verification(Number(flags.rounds ?? 20_000));
  process.stdout.write(`  ${v.verifyUs.toFixed(1)} µs per join, ${v.issueUs.toFixed(1)} µs per challenge\n`);
  process.stdout.write('solving in headless Chromium…\n');
  const s = await solving(flags.steps?.split(',').map(Number) ?? DEFAULT_STEPS, samples);
  const result = {
    at: new Date().toISOString(),
    machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
    verification: v,
    solving: s,
  };
  const md = [
    `# Proof of work: costs (${result.at.slice(0, 10)})`,
    '',
    `Machine: ${result.machine.cpus} CPUs (${result.machine.model}), Node ${result.machine.node}; \`npm run bench:pow\`.`,
    '',
    `- Server-side verification of one join's solution: **${v.verifyUs.toFixed(1)} µs** (decode, the altcha v1 scheme's SHA-256 and HMAC on node:crypto, product/user/expiry/difficulty), then one Redis command (SET NX PX).`,
    `- Issuing one challenge: ${v.issueUs.toFixed(1)} µs.`,
    '',
    `Solve time in headless Chromium, the waiting page's solver with ${s.workers} Web Workers, ${samples} challenges per step:`,
    '',
    '| step | largest number | median | mean | p90 |',
    '|---|---|---|---|---|',
    ...s.steps.map(
      (t, i) => `| ${i} | ${t.maxNumber.toLocaleString('en')} | ${t.medianMs} ms | ${t.meanMs} ms | ${t.p90Ms} ms |`,
    ),
    '',
  ].join('\n');
  writeResults(flags.out ?? RESULTS_DIR, 'pow', result, md);
  process.stdout.write(`\n${md}`);
}

runMain('', main);
