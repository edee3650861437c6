// The default branch of a switch over a tagged union. The `never` parameter makes the compiler
// reject the switch once the union grows a kind that no case handles; at run time it can only be
// reached by a value that lied about its type.

export function unreachable(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}
