// Stops what global-setup started.
export default async function globalTeardown(): Promise<void> {
  const stops = (globalThis as { __flashsaleStops?: Array<() => Promise<void>> }).__flashsaleStops ?? [];
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
}
