// The sale with returns: how long returned units take to sell again (the first sell-out, pays,
// cancels, the expiry lag, the resale), each figure from PostgreSQL where the run could read it.
import { BACKEND_CONCURRENCY } from '../returns';
import type { BenchmarkReport } from '../types';
import { returnsOf } from './find';
import { batchName, countsText, holdName, layout, ms, rate, seconds, spreadMs, statusWord } from './format';

/** What the sale with returns measures, for the report. */
const RETURNS_MEASURES =
  "How long returned units take to sell again. The sale sells out as above; the shop then pays most reservations at once, cancels some (POST /orders/:id/cancel) and leaves the others to expire past the product's short paymentTimeoutS, while new buyers (one request each, paying at once) ask from just before the first cancel until every returned unit is sold again.";

export function returnsMarkdown(report: BenchmarkReport): string[] {
  return returnsOf(report).flatMap((r) => {
    const x = r.returns;
    const back = x.returnedUnits.cancelled + x.returnedUnits.expired;
    const pct = (n: number) => (r.created > 0 ? ` (${Math.round((n / r.created) * 100)}%)` : '');
    const rows: Record<string, string> = {
      '(a) first sell-out: first request to last 201': `**${seconds(r.sellOutMs)}**, ${rate(r.ordersPerSec)} orders/s; ${r.statusCounts['201'] ?? 0} x 201, ${r.statusCounts['410'] ?? 0} x 410 of ${r.buyers} buyers`,
      'paid at once, before any return': `${x.pays.ok} of ${x.planned.pay}${pct(x.pays.ok)} in ${ms(x.pays.elapsedMs)} ms, ${rate(x.pays.perSec)} pays/s (${BACKEND_CONCURRENCY} at a time)`,
      'back on sale (PG)': `${back} units: ${x.returnedUnits.cancelled} cancelled${pct(x.returnedUnits.cancelled)}, ${x.returnedUnits.expired} expired${pct(x.returnedUnits.expired)} (paymentTimeoutS ${x.paymentTimeoutS} s)`,
      '(c) cancels, while the new buyers ask': `**${rate(x.cancels.perSec)} cancels/s**: ${x.cancels.ok} in ${ms(x.cancels.elapsedMs)} ms, ${BACKEND_CONCURRENCY} at a time, p50 / p99 ${ms(x.cancels.latencyMs?.p50)} / ${ms(x.cancels.latencyMs?.p99)} ms`,
      '(c) expiry lag: expiresAt to units back on sale (PG), p50 / p99 / max': `**${spreadMs(x.expiryLagMs)}** over ${x.expiryLagMs?.count ?? 0} orders; each process sweeps every ${x.expirySweepMs} ms`,
      '(b) first return to the resale sold out (PG)': `**${seconds(x.resale.firstReturnToSoldOutMs)}**`,
      'last return to the resale sold out (PG)': seconds(x.resale.lastReturnToSoldOutMs),
      'a returned unit on sale until sold again (PG; k-th back paired with k-th resold), p50 / p99 / max': spreadMs(
        x.resale.onSaleMs,
      ),
      'new buyers (one request each)': `${x.resale.requests} requests in ${x.resale.elapsedS.toFixed(2)} s: ${countsText(x.resale.statusCounts)}; their pays ${countsText(x.resale.paysStatusCounts)}`,
      'pay / cancel answers after the sell-out': `pay ${countsText(x.pays.statusCounts)}; cancel ${countsText(x.cancels.statusCounts)}`,
      'orders at the end (PG)': `paid ${x.statuses.paid}, cancelled ${x.statuses.cancelled}, expired ${x.statuses.expired}, reserved ${x.statuses.reserved}`,
      verified: `${statusWord(r)}: ${r.verification.checks.map((c) => `${c.ok ? '' : '**FAILED** '}${c.name}`).join('; ')}`,
    };
    return [
      `## The sale with returns: ${r.stock} units as ${layout(r)}, ${r.buyers} buyers, ${back} units back and resold (ORDER_HOLD_MS=${holdName(r.holdMs)}, Redlock, WORKERS=${r.workers}, ORDER_BATCH_MAX ${batchName(r.batchMax)}, EXPIRY_SWEEP_MS=${x.expirySweepMs})`,
      '',
      `${RETURNS_MEASURES} (b) includes waiting out the ${x.paymentTimeoutS} s payment timeout that the run sets; the service's own share is the expiry lag and the time a returned unit stays on sale. Times marked PG come from PostgreSQL's clock (orders' created_at, expires_at, closed_at).`,
      '',
      '| figure | this run |',
      '|---|---|',
      ...Object.entries(rows).map(([what, value]) => `| ${what} | ${value} |`),
      '',
    ];
  });
}
