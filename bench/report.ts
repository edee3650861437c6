// Turns a run into latest.md (also printed on the console) and latest.json: each section lives in
// bench/report/, this file puts them in their order.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { batchMarkdown } from './report/batch';
import { costsMarkdown } from './report/costs';
import { lockCountersMarkdown, lockingMarkdown } from './report/locking';
import { memoryMarkdown } from './report/memory';
import { redisSetupsMarkdown } from './report/redis-setups';
import { returnsMarkdown } from './report/returns';
import { saleMarkdown } from './report/sale';
import { speedMarkdown } from './report/speed';
import { summaryMarkdown, verdictLines } from './report/summary';
import { sweepMarkdown } from './report/sweep';
import { targetsMarkdown } from './report/targets';
import type { BenchmarkReport } from './types';

export { findFast, findHealth, findSoldOut } from './report/find';
export { redisSetupsSection } from './report/redis-setups';
export { targets } from './report/targets';

export function renderMarkdown(report: BenchmarkReport): string {
  return [
    ...summaryMarkdown(report),
    ...targetsMarkdown(report),
    ...speedMarkdown(report),
    ...batchMarkdown(report),
    ...redisSetupsMarkdown(report),
    ...lockingMarkdown(report),
    ...sweepMarkdown(report),
    ...saleMarkdown(report),
    ...returnsMarkdown(report),
    ...costsMarkdown(report),
    ...memoryMarkdown(report),
    ...lockCountersMarkdown(report),
  ].join('\n');
}

export function writeReports(report: BenchmarkReport, outDir: string): { json: string; md: string } {
  mkdirSync(outDir, { recursive: true });
  const files = { json: join(outDir, 'latest.json'), md: join(outDir, 'latest.md') };
  writeFileSync(files.json, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(files.md, `${renderMarkdown(report)}\n`);
  return files;
}

/** What the console shows at the end of a run: the report itself, then the verdict. */
export function renderConsole(report: BenchmarkReport): string {
  return [renderMarkdown(report), ...verdictLines(report)].join('\n');
}
