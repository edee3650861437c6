// What a process remembers per ticket is bounded: past `max` entries the oldest set goes first
// (a Map keeps insertion order). Shared by the ticket tokens and the per-ticket memory of polls.

/** Sets `key`, first dropping the oldest entry when the map already holds `max`. */
export function setBounded<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  if (!map.has(key) && map.size >= max) {
    const oldest = map.keys().next();
    if (oldest.done !== true) map.delete(oldest.value);
  }
  map.set(key, value);
}
