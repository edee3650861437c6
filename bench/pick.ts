// One helper every part of the benchmark uses, kept below all of them.

/** `o` with only these keys, in this order (latest.json keeps it). */
export function pick<T, K extends keyof T>(o: T, ...keys: K[]): Pick<T, K> {
  return Object.fromEntries(keys.map((k) => [k, o[k]])) as Pick<T, K>;
}
