// altcha-lib names its v1 scheme in package.json "exports" ('altcha-lib/v1'), which this
// project's module resolution (CommonJS, node10) does not read, and its typesVersions hide the
// file's own types: the part of the API the service uses is declared here, as the package's
// dist/cjs/v1/index.d.ts has it. Node's require follows the exports map at run time.
declare module 'altcha-lib/v1' {
  export type Algorithm = 'SHA-1' | 'SHA-256' | 'SHA-512';
  export interface Challenge {
    algorithm: Algorithm;
    challenge: string;
    maxnumber?: number;
    salt: string;
    signature: string;
  }
  export interface ChallengeOptions {
    algorithm?: Algorithm;
    expires?: Date;
    hmacKey: string;
    maxnumber?: number;
    number?: number;
    params?: Record<string, string>;
    salt?: string;
    saltLength?: number;
  }
  export interface Payload {
    algorithm: Algorithm;
    challenge: string;
    number: number;
    salt: string;
    signature: string;
  }
  export interface Solution {
    number: number;
    took: number;
    worker?: boolean;
  }
  export function createChallenge(options: ChallengeOptions): Promise<Challenge>;
  export function extractParams(payload: string | Payload | Challenge): { [k: string]: string };
  export function verifySolution(payload: string | Payload, hmacKey: string, checkExpires?: boolean): Promise<boolean>;
  export function solveChallenge(
    challenge: string,
    salt: string,
    algorithm?: string,
    max?: number,
    start?: number,
  ): { promise: Promise<Solution | null>; controller: AbortController };
}
