// Peak RSS of every process start (the service's primary and workers, and the peers), against the
// service's target.
import type { BenchmarkReport, ServiceRun } from '../types';
import { peakRss } from './find';
import { batchName, SETUP_NAME } from './format';

export function memoryMarkdown(report: BenchmarkReport): string[] {
  const title = ['## Memory (peak RSS per process, sampled every 500 ms)', ''];
  const peak = peakRss(report);
  if (peak === null) return [...title, 'Not measured (needs /proc).', ''];
  const row = (svc: ServiceRun) => {
    const primary = svc.processes.find((p) => p.role === 'primary');
    const workers = svc.processes.filter((p) => p.role === 'worker');
    const what =
      svc.target === 'service'
        ? `service ${svc.locking}, hold ${svc.holdMs} ms, WORKERS=${svc.workers}, ORDER_BATCH_MAX ${batchName(svc.batchMax)}${svc.expirySweepMs ? `, EXPIRY_SWEEP_MS=${svc.expirySweepMs}` : ''}${svc.redis && svc.redis !== 'single' ? `, ${SETUP_NAME[svc.redis]}` : ''}`
        : `peer ${svc.target}${svc.target === 'bare' ? ` (${svc.locking})` : ''}, hold ${svc.holdMs} ms`;
    return `| ${what} | ${primary ? `${primary.peakRssMb.toFixed(0)} MB` : '-'} | ${workers.map((w) => `${w.peakRssMb.toFixed(0)} MB`).join(', ') || '-'} |`;
  };
  return [
    ...title,
    `Highest of any service process: **${peak.toFixed(0)} MB** (target < ${report.rssTargetMb} MB: ${peak < report.rssTargetMb ? 'met' : '**NOT MET**'}). The peers are listed for comparison and do not count.`,
    '',
    '| process start | primary (with WORKERS=1: the one serving process) | workers |',
    '|---|--:|---|',
    ...report.services.map(row),
    '',
  ];
}
