// In-process apps built and not closed yet (in-process.ts adds and removes them). A module of its
// own so that after-each-file.ts can close what a spec left open without loading the application.

export const openApps = new Set<{ close(): Promise<void> }>();

/** Closes every app left open and says how many there were. */
export async function closeAppsLeftOpen(): Promise<number> {
  const left = [...openApps];
  await Promise.all(left.map((a) => a.close()));
  return left.length;
}
