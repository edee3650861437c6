// The service's configuration, grouped by area. Each area is one class-validator class: it is the
// schema (decorators), the type (the class) and the Nest injection token (the class again), so a
// service asks for the slice it uses by its constructor parameter type. `@Env` ties a property to
// its environment variable; a bad value stops the start with a message that names the variable.
import { plainToInstance, Transform } from 'class-transformer';
import {
  ArrayMaxSize,
  ArrayMinSize,
  IsBoolean,
  IsIn,
  IsInt,
  IsNumber,
  IsOptional,
  IsString,
  Matches,
  Max,
  Min,
  MinLength,
  ValidateIf,
  validateSync,
} from 'class-validator';
import {
  AreaClass,
  Env,
  envNamesOf,
  IsRising,
  SECRET_VARIABLES,
  emptyToUndefined,
  toBool,
  toInt,
  toIntList,
  toList,
  toNumber,
} from './env';

export { SECRET_VARIABLES } from './env';

const DEFAULT_SHED_LAG_MS = [150, 300, 600];
const SHED_LAG_MESSAGE =
  'SHED_LAG_MS must be three rising whole numbers of milliseconds (joins, new orders, the rest), for example 150,300,600, or off';

/** The HTTP server and its processes. */
export class HttpConfig {
  @Env('PORT') @Transform(toInt) @IsInt() @Min(0) @Max(65535) port = 3000;
  @Env('HOST') @IsString() host = '0.0.0.0';
  /** Serving processes sharing the port (a cluster when > 1). */
  @Env('WORKERS') @Transform(toInt) @IsInt() @Min(1) @Max(64) workers = 1;
  /** The Retry-After of every 503 answer. */
  @Env('RETRY_AFTER_S') @Transform(toInt) @IsInt() @Min(1) @Max(3600) retryAfterS = 1;
  /** Longest a client may take to send a request's headers, from its first byte (or from connecting). */
  @Env('HEADERS_TIMEOUT_MS') @Transform(toInt) @IsInt() @Min(500) @Max(120_000) headersTimeoutMs = 5000;
  /** Longest a client may take to send a whole request, headers and body; at least HEADERS_TIMEOUT_MS. */
  @Env('REQUEST_TIMEOUT_MS')
  @Transform(toInt)
  @IsInt()
  @Min(500)
  @Max(600_000)
  requestTimeoutMs = 10_000;
  /** Open connections one client address may hold with one process (0: no cap); trusted proxies are not counted. */
  @Env('MAX_CONNECTIONS_PER_IP') @Transform(toInt) @IsInt() @Min(0) @Max(1_000_000) maxConnectionsPerIp = 256;
}

export class DatabaseConfig {
  /** Unset: an embedded PostgreSQL is started (see EmbeddedConfig). */
  @Env('DATABASE_URL')
  @Transform(emptyToUndefined)
  @IsOptional()
  @Matches(/^postgres(ql)?:\/\/.+/, { message: 'DATABASE_URL must be a postgres:// URL' })
  url?: string;
  @Env('DB_POOL_SIZE') @Transform(toInt) @IsInt() @Min(1) @Max(500) poolSize = 20;
  @Env('DB_TIMEOUT_MS') @Transform(toInt) @IsInt() @Min(100) @Max(120_000) timeoutMs = 5000;
}

export class RedisConfig {
  /** Unset: a redis-server from PATH is started. */
  @Env('REDIS_URL')
  @Transform(emptyToUndefined)
  @IsOptional()
  @Matches(/^rediss?:\/\/.+/, { message: 'REDIS_URL must be a redis:// URL' })
  url?: string;
  /** Redlock masters; unset: the one at `url`. */
  @Env('REDIS_LOCK_URLS')
  @Transform(toList)
  @IsOptional()
  @ArrayMinSize(1)
  @Matches(/^rediss?:\/\/\S+$/, {
    each: true,
    message: 'REDIS_LOCK_URLS must be a comma-separated list of redis:// URLs',
  })
  lockUrls?: string[];
  /** Some nodes of a Redis Cluster: every Redis use goes to the cluster; replaces REDIS_URL and REDIS_LOCK_URLS. */
  @Env('REDIS_CLUSTER_NODES')
  @Transform(toList)
  @IsOptional()
  @ArrayMinSize(1)
  @Matches(/^rediss?:\/\/\S+$/, {
    each: true,
    message: 'REDIS_CLUSTER_NODES must be a comma-separated list of redis:// URLs',
  })
  clusterNodes?: string[];
  @Env('REDIS_TIMEOUT_MS') @Transform(toInt) @IsInt() @Min(50) @Max(60_000) timeoutMs = 1000;
}

export class LocksConfig {
  @Env('LOCK_TTL_MS') @Transform(toInt) @IsInt() @Min(50) @Max(60_000) ttlMs = 2000;
  @Env('USER_LOCK_TTL_MS') @Transform(toInt) @IsInt() @Min(50) @Max(120_000) userTtlMs = 15_000;
  /** Extend a held lock before it expires, so a slow critical section keeps it. */
  @Env('LOCK_EXTEND') @Transform(toBool) @IsBoolean() extend = true;
  /** Longest an order waits for a segment lock when every live segment is busy. */
  @Env('LOCK_WAIT_MS') @Transform(toInt) @IsInt() @Min(0) @Max(60_000) waitMs = 5000;
  @Env('LOCK_RETRY_DELAY_MS') @Transform(toInt) @IsInt() @Min(1) @Max(10_000) retryDelayMs = 4;
  @Env('LOCK_RETRY_JITTER_MS') @Transform(toInt) @IsInt() @Min(0) @Max(10_000) retryJitterMs = 8;
  /** Group commit: most orders of one process sold in one segment lock hold and one statement (1 = one order per hold). */
  @Env('ORDER_BATCH_MAX') @Transform(toInt) @IsInt() @Min(1) @Max(1000) batchMax = 32;
  /**
   * Group commit: most segment locks of one product that one process holds at once; its further
   * orders wait and ride in those holds (larger batches, fewer statements). Unused with ORDER_BATCH_MAX=1.
   */
  @Env('ORDER_HOLDS_MAX') @Transform(toInt) @IsInt() @Min(1) @Max(1000) holdsMax = 4;
  /**
   * Simulated downstream work held inside each segment lock hold that sold something: the fault
   * specs keep orders in flight with it, the benchmark measures what the segments gain under it. 0 in production.
   */
  @Env('ORDER_HOLD_MS') @Transform(toInt) @IsInt() @Min(0) @Max(10_000) holdMs = 0;
}

export class InventoryConfig {
  /** How long a product's row is served from memory. */
  @Env('PRODUCT_CACHE_MS') @Transform(toInt) @IsInt() @Min(0) @Max(60_000) productCacheMs = 1000;
  /** Longest a rebalance waits for the segment row locks (capped by DB_TIMEOUT_MS). */
  @Env('REBALANCE_WAIT_MS') @Transform(toInt) @IsInt() @Min(100) @Max(120_000) rebalanceWaitMs = 10_000;
  /** How often each process looks for reservations past their expiresAt (0: this process never sweeps). */
  @Env('EXPIRY_SWEEP_MS') @Transform(toInt) @IsInt() @Min(0) @Max(3_600_000) expirySweepMs = 1000;
}

export class AdminConfig {
  /** Unset: a random token is made at start and logged once. */
  @Env('ADMIN_TOKEN')
  @Transform(emptyToUndefined)
  @IsOptional()
  @IsString()
  @MinLength(16, { message: 'ADMIN_TOKEN must be at least 16 characters' })
  token?: string;
}

/** Budget `<per second>[,<burst>]`; 0 turns the limit off. */
const RATE_BUDGET = /^(0|[1-9][0-9]{0,5})(,[1-9][0-9]{0,6})?$/;

/** The door: who may call, how often, and how long a process trusts what it knows of a sold-out product. */
export class DoorConfig {
  /** Buyer calls per user: `<per second>[,<burst>]` (burst defaults to the rate); 0: no limit. */
  @Env('RATE_LIMIT_USER')
  @Matches(RATE_BUDGET, { message: 'RATE_LIMIT_USER must be <per second>[,<burst>], for example 5 or 5,10 (0: off)' })
  rateLimitUser = '5,10';
  /** Buyer calls per client address, as RATE_LIMIT_USER. */
  @Env('RATE_LIMIT_IP')
  @Matches(RATE_BUDGET, { message: 'RATE_LIMIT_IP must be <per second>[,<burst>], for example 50 or 50,100 (0: off)' })
  rateLimitIp = '50,100';
  /**
   * The proxies in front, whose X-Forwarded-For is believed: comma-separated addresses or CIDR
   * ranges (or loopback, linklocal, uniquelocal); unset: the socket's address is the client's.
   */
  @Env('TRUST_PROXY') @Transform(toList) @IsOptional() @ArrayMinSize(1) @IsString({ each: true }) trustProxy?: string[];
  /** Longest a process answers from what it knows of a sold-out product after units came back. */
  @Env('SOLD_OUT_STALE_MS') @Transform(toInt) @IsInt() @Min(10) @Max(60_000) soldOutStaleMs = 100;
}

/**
 * Load shedding at the door (docs/overload.md): above a level of event-loop delay, a class of call
 * is refused 503 OVERLOADED before it does any work. Joins go first, then new orders, then what
 * settles an order or follows one (pay, cancel, reads of orders and tickets, the event stream);
 * health checks, metrics and the operator's calls never.
 */
export class OverloadConfig {
  /**
   * The mean event-loop delay (ms, over each SHED_SAMPLE_MS) above which joins, new orders and the
   * rest are shed: three rising numbers, or `off`.
   */
  @Env('SHED_LAG_MS')
  @Transform(({ value }: { value: unknown }) =>
    value === 'off' ? [] : value === '' ? [...DEFAULT_SHED_LAG_MS] : toIntList({ value }),
  )
  @ValidateIf((o: OverloadConfig) => o.lagMs.length > 0)
  @ArrayMinSize(3, { message: SHED_LAG_MESSAGE })
  @ArrayMaxSize(3, { message: SHED_LAG_MESSAGE })
  @IsInt({ each: true, message: SHED_LAG_MESSAGE })
  @Min(1, { each: true, message: SHED_LAG_MESSAGE })
  @Max(60_000, { each: true, message: SHED_LAG_MESSAGE })
  @IsRising({ message: SHED_LAG_MESSAGE })
  lagMs: number[] = [...DEFAULT_SHED_LAG_MS];
  /** How often the event-loop delay is sampled, ms. */
  @Env('SHED_SAMPLE_MS') @Transform(toInt) @IsInt() @Min(10) @Max(10_000) sampleMs = 100;
  /**
   * New orders one process has on the order path at once (waiting for a segment lock or
   * PostgreSQL) beyond which a further new order is shed: a queue that long is served no faster,
   * only later. 0: no bound.
   */
  @Env('SHED_ORDERS_IN_FLIGHT') @Transform(toInt) @IsInt() @Min(0) @Max(1_000_000) ordersInFlight = 256;
}

/** Who the buyers and the shop are. */
export class IdentityConfig {
  /** HS256 secret of buyer tokens (at least 32 characters); with it every buyer call needs a verified token. */
  @Env('BUYER_JWT_SECRET')
  @Transform(emptyToUndefined)
  @IsOptional()
  @IsString()
  @MinLength(32, { message: 'BUYER_JWT_SECRET must be at least 32 characters' })
  jwtSecret?: string;
  /** PEM public key of buyer tokens (RS256 or ES256); as BUYER_JWT_SECRET, for issuers that sign with a private key. */
  @Env('BUYER_JWT_PUBLIC_KEY')
  @Transform(emptyToUndefined)
  @IsOptional()
  @Matches(/-----BEGIN PUBLIC KEY-----/, {
    message: 'BUYER_JWT_PUBLIC_KEY must be a PEM public key (-----BEGIN PUBLIC KEY-----)',
  })
  jwtPublicKey?: string;
  /** The shop backend's token (pay; read or cancel any order). Unset: a random one, logged once. */
  @Env('SHOP_TOKEN')
  @Transform(emptyToUndefined)
  @IsOptional()
  @IsString()
  @MinLength(16, { message: 'SHOP_TOKEN must be at least 16 characters' })
  shopToken?: string;
}

/** The waiting room: how many buyers are let in at once, how its queue spreads, and how admissions are signed. */
export class WaitingRoomConfig {
  /** Admissions outstanding (admitted, not ordered, not expired) stay below ceil(ratio x units left). */
  @Env('ADMISSION_RATIO') @Transform(toNumber) @IsNumber() @Min(1) @Max(100) admissionRatio = 1.5;
  /** How often a process looks for an admission step to make, and the oldest admission view a poll is answered from. */
  @Env('ADMISSION_TICK_MS') @Transform(toInt) @IsInt() @Min(10) @Max(10_000) admissionTickMs = 100;
  /**
   * The width of a new room's buckets, ms of PostgreSQL's clock: joins within one bucket are drawn
   * by lottery among themselves, buckets follow each other in time (a room keeps the width it was made with).
   */
  @Env('QUEUE_BUCKET_MS') @Transform(toInt) @IsInt() @Min(10) @Max(60_000) bucketMs = 100;
  /** HS256 key of admission tokens; unset: one made once and kept in PostgreSQL, shared by every process. */
  @Env('ADMISSION_SECRET')
  @Transform(emptyToUndefined)
  @IsOptional()
  @IsString()
  @MinLength(32, { message: 'ADMISSION_SECRET must be at least 32 characters' })
  secret?: string;
}

/** Proof of work at the queue (docs/proof-of-work.md): the challenges' key, their lifetime, and the difficulty's steps. */
export class ProofOfWorkConfig {
  /** HMAC key of the challenges; unset: one made once and kept in PostgreSQL, shared by every process. */
  @Env('POW_SECRET')
  @Transform(emptyToUndefined)
  @IsOptional()
  @IsString()
  @MinLength(32, { message: 'POW_SECRET must be at least 32 characters' })
  secret?: string;
  /** How long a challenge may be solved and used, seconds. */
  @Env('POW_CHALLENGE_TTL_S') @Transform(toInt) @IsInt() @Min(5) @Max(3600) challengeTtlS = 120;
  /** Joins per second to one product, in one process, above which new challenges get harder. */
  @Env('POW_JOINS_PER_S') @Transform(toInt) @IsInt() @Min(1) @Max(1_000_000) joinsPerS = 100;
  /** The difficulty's steps: the largest secret number of a challenge (the work is half of it on average), rising. */
  @Env('POW_STEPS')
  @Transform(toIntList)
  @ArrayMinSize(1)
  @ArrayMaxSize(10)
  @IsInt({ each: true, message: 'POW_STEPS must be rising whole numbers between 100 and 100000000, comma-separated' })
  @Min(100, { each: true })
  @Max(100_000_000, { each: true })
  @IsRising({ message: 'POW_STEPS must be rising whole numbers between 100 and 100000000, comma-separated' })
  steps: number[] = [20_000, 60_000, 200_000, 600_000];
  /** Seconds the joins must stay below a step's level before the difficulty eases by one step. */
  @Env('POW_EASE_S') @Transform(toInt) @IsInt() @Min(1) @Max(3600) easeS = 10;
}

/** The order event stream: how long events are kept, how often readers look for new ones, and the webhook. */
export class EventsConfig {
  /** Events older than this are deleted (not before the webhook delivered them). */
  @Env('EVENTS_RETENTION_S') @Transform(toInt) @IsInt() @Min(60) @Max(31_536_000) retentionS = 604_800;
  /** How often a waiting reader (long-poll, SSE) or the webhook looks for new events. */
  @Env('EVENTS_POLL_MS') @Transform(toInt) @IsInt() @Min(10) @Max(10_000) pollMs = 200;
  /** Where events are POSTed (batches, signed); unset: no webhook. */
  @Env('WEBHOOK_URL')
  @Transform(emptyToUndefined)
  @IsOptional()
  @Matches(/^https?:\/\/[^\s]+$/, { message: 'WEBHOOK_URL must be an http:// or https:// URL' })
  webhookUrl?: string;
  /** HMAC-SHA256 key of the webhook's signature header; required with WEBHOOK_URL. */
  @Env('WEBHOOK_SECRET')
  @Transform(emptyToUndefined)
  @ValidateIf((o: EventsConfig) => o.webhookUrl !== undefined || o.webhookSecret !== undefined)
  @IsString({ message: 'WEBHOOK_SECRET must be set (at least 32 characters) when WEBHOOK_URL is' })
  @MinLength(32, { message: 'WEBHOOK_SECRET must be at least 32 characters' })
  webhookSecret?: string;
  /** Deliveries of one batch before its events are set aside as dead letters. */
  @Env('WEBHOOK_MAX_ATTEMPTS') @Transform(toInt) @IsInt() @Min(1) @Max(100) webhookMaxAttempts = 8;
  /** How long a delivery may take before it counts as failed. */
  @Env('WEBHOOK_TIMEOUT_MS') @Transform(toInt) @IsInt() @Min(100) @Max(120_000) webhookTimeoutMs = 5000;
  /** The first retry's delay; each next one doubles, up to 60 s. */
  @Env('WEBHOOK_BACKOFF_MS') @Transform(toInt) @IsInt() @Min(10) @Max(60_000) webhookBackoffMs = 500;
  /** Events per POST at most. */
  @Env('WEBHOOK_BATCH') @Transform(toInt) @IsInt() @Min(1) @Max(1000) webhookBatch = 100;
}

/** The operator page (GET /admin). */
export class OperatorConfig {
  /** How often this process adds its counters to the deployment's per-second records in Redis (one MULTI); 0: never. */
  @Env('LIVE_STATS_MS') @Transform(toInt) @IsInt() @Min(0) @Max(60_000) liveStatsMs = 1000;
}

export class LoggingConfig {
  @Env('LOG_LEVEL') @IsIn(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) level = 'info';
}

/** The embedded servers started when DATABASE_URL / REDIS_URL are unset. */
export class EmbeddedConfig {
  /** Where the embedded PostgreSQL keeps its data. */
  @Env('DATA_DIR') @IsString() dataDir = '.data';
}

/** Every area, by the key it has in the configuration object. */
export const CONFIG_AREAS = {
  http: HttpConfig,
  database: DatabaseConfig,
  redis: RedisConfig,
  locks: LocksConfig,
  inventory: InventoryConfig,
  admin: AdminConfig,
  door: DoorConfig,
  overload: OverloadConfig,
  identity: IdentityConfig,
  waitingRoom: WaitingRoomConfig,
  proofOfWork: ProofOfWorkConfig,
  events: EventsConfig,
  operator: OperatorConfig,
  logging: LoggingConfig,
  embedded: EmbeddedConfig,
} as const;

type Areas = typeof CONFIG_AREAS;
export type AppConfig = { [K in keyof Areas]: InstanceType<Areas[K]> };

// After the embedded servers have started every URL is known and the admin token is set.
export type ResolvedDatabaseConfig = DatabaseConfig & { url: string };
/**
 * Where Redis is: one server for hints and user locks with a Redlock quorum of lock masters (by
 * default that same server), or a Redis Cluster for everything.
 */
export type RedisTopology =
  { kind: 'standalone'; url: string; lockUrls: string[] } | { kind: 'cluster'; nodes: string[] };
export type ResolvedRedisConfig = RedisConfig & { topology: RedisTopology };
export type ResolvedAdminConfig = AdminConfig & { token: string };
export type ResolvedIdentityConfig = IdentityConfig & { shopToken: string };
export type ResolvedConfig = Omit<AppConfig, 'database' | 'redis' | 'admin' | 'identity'> & {
  database: ResolvedDatabaseConfig;
  redis: ResolvedRedisConfig;
  admin: ResolvedAdminConfig;
  identity: ResolvedIdentityConfig;
};

export class ConfigurationError extends Error {}

/** Validates the environment, area by area; throws ConfigurationError naming each bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): AppConfig {
  const problems: string[] = [];
  const config: Record<string, object> = {};
  for (const [key, area] of Object.entries(CONFIG_AREAS) as Array<[keyof Areas, AreaClass]>) {
    const names = envNamesOf(area);
    const given: Record<string, string> = {};
    for (const name of names.values()) if (env[name] !== undefined) given[name] = env[name];
    const slice = plainToInstance(area, given, { exposeDefaultValues: true });
    for (const e of validateSync(slice, { whitelist: true })) {
      const name = names.get(e.property) ?? e.property;
      // class-validator's own messages start with the property; the operator knows the variable.
      const messages = Object.values(e.constraints ?? {}).map((m) =>
        m.startsWith(`${e.property} `) ? name + m.slice(e.property.length) : m,
      );
      // A secret is named, never shown: the refusal goes to logs that more people read than the secret's owner.
      const shown = SECRET_VARIABLES.has(name) ? `${name} (value not shown)` : `${name}=${JSON.stringify(given[name])}`;
      problems.push(`  ${shown}: ${messages.join('; ')}`);
    }
    config[key] = slice;
  }
  const redis = config.redis as RedisConfig;
  if (redis.clusterNodes) {
    for (const [name, value] of [
      ['REDIS_URL', redis.url],
      ['REDIS_LOCK_URLS', redis.lockUrls],
    ] as const) {
      if (value !== undefined)
        problems.push(`  REDIS_CLUSTER_NODES and ${name} are both set: a cluster replaces ${name}; unset one of them`);
    }
  }
  const identity = config.identity as IdentityConfig;
  if (identity.jwtSecret && identity.jwtPublicKey) {
    problems.push(
      '  BUYER_JWT_SECRET and BUYER_JWT_PUBLIC_KEY are both set: buyer tokens are verified one way; unset one of them',
    );
  }
  const http = config.http as HttpConfig;
  if (typeof http.requestTimeoutMs === 'number' && http.requestTimeoutMs < http.headersTimeoutMs)
    problems.push('  REQUEST_TIMEOUT_MS is below HEADERS_TIMEOUT_MS: the whole request includes its headers');
  if (problems.length > 0) throw new ConfigurationError(`Invalid configuration:\n${problems.join('\n')}`);
  return config as AppConfig;
}
