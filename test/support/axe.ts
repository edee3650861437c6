/// <reference lib="dom" />
// (The callback of page.evaluate runs in the browser, where axe-core's script put `axe`.)
// The WCAG 2.1 AA checks of axe-core (Deque's accessibility engine, from node_modules) run in a
// page of the browser specs. Its script is added to the page as a script tag: the page's context
// must be made with `bypassCSP: true`, since the service's pages allow only their own scripts.
import type { Page } from 'playwright-core';
import type { AxeResults } from 'axe-core';

/** The rule sets of WCAG 2.0 and 2.1, levels A and AA. */
export const WCAG_21_AA = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];

/** One broken rule, as a spec's failure shows it: the rule, its impact, and where. */
export interface AxeViolation {
  rule: string;
  impact: string | null;
  help: string;
  targets: string[];
}

/** The WCAG 2.1 AA violations axe-core finds in the page as it is now. */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  if (!(await page.evaluate(() => 'axe' in window)))
    await page.addScriptTag({ path: require.resolve('axe-core/axe.min.js') });
  const results = await page.evaluate(
    (tags) =>
      (window as unknown as { axe: { run: (c: Document, o: object) => Promise<AxeResults> } }).axe.run(document, {
        runOnly: { type: 'tag', values: tags },
        resultTypes: ['violations'],
      }),
    WCAG_21_AA,
  );
  return results.violations.map((v) => ({
    rule: v.id,
    impact: v.impact ?? null,
    help: v.help,
    targets: v.nodes.map((n) => n.target.join(' ')),
  }));
}
