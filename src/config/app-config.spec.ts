// Configuration from the environment: defaults, parsing, and refusals that name the variable.
import { CONFIG_AREAS, ConfigurationError, loadConfig, SECRET_VARIABLES } from './app-config';

function refusal(env: NodeJS.ProcessEnv): ConfigurationError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigurationError) return err;
    throw err;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
}

describe('loadConfig', () => {
  it('should use the documented defaults for an empty environment', () => {
    expect(loadConfig({})).toEqual({
      http: {
        port: 3000,
        host: '0.0.0.0',
        workers: 1,
        retryAfterS: 1,
        headersTimeoutMs: 5000,
        requestTimeoutMs: 10_000,
        maxConnectionsPerIp: 256,
      },
      database: { url: undefined, poolSize: 20, timeoutMs: 5000 },
      redis: { url: undefined, lockUrls: undefined, timeoutMs: 1000 },
      locks: {
        ttlMs: 2000,
        userTtlMs: 15_000,
        extend: true,
        waitMs: 5000,
        retryDelayMs: 4,
        retryJitterMs: 8,
        batchMax: 32,
        holdsMax: 4,
        holdMs: 0,
      },
      inventory: { productCacheMs: 1000, rebalanceWaitMs: 10_000, expirySweepMs: 1000 },
      admin: { token: undefined },
      door: { rateLimitUser: '5,10', rateLimitIp: '50,100', trustProxy: undefined, soldOutStaleMs: 100 },
      overload: { lagMs: [150, 300, 600], sampleMs: 100, ordersInFlight: 256 },
      identity: { jwtSecret: undefined, jwtPublicKey: undefined, shopToken: undefined },
      waitingRoom: { admissionRatio: 1.5, admissionTickMs: 100, bucketMs: 100, secret: undefined },
      proofOfWork: {
        secret: undefined,
        challengeTtlS: 120,
        joinsPerS: 100,
        steps: [20_000, 60_000, 200_000, 600_000],
        easeS: 10,
      },
      events: {
        retentionS: 604_800,
        pollMs: 200,
        webhookUrl: undefined,
        webhookSecret: undefined,
        webhookMaxAttempts: 8,
        webhookTimeoutMs: 5000,
        webhookBackoffMs: 500,
        webhookBatch: 100,
      },
      operator: { liveStatsMs: 1000 },
      logging: { level: 'info' },
      embedded: { dataDir: '.data' },
    });
  });

  it('should give each area as an instance of its own class, the injection token of that slice', () => {
    const c = loadConfig({});
    for (const [key, area] of Object.entries(CONFIG_AREAS)) expect(c[key as keyof typeof c]).toBeInstanceOf(area);
  });

  it('should read every variable it is given into its area', () => {
    const c = loadConfig({
      PORT: '8080',
      HOST: '127.0.0.1',
      DATABASE_URL: 'postgres://u:p@db:5432/flashsale',
      REDIS_URL: 'redis://cache:6379',
      ADMIN_TOKEN: 'a-long-enough-admin-token',
      WORKERS: '4',
      ORDER_HOLD_MS: '20',
      LOCK_TTL_MS: '500',
      USER_LOCK_TTL_MS: '900',
      LOCK_WAIT_MS: '0',
      LOCK_EXTEND: 'off',
      LOCK_RETRY_DELAY_MS: '7',
      LOCK_RETRY_JITTER_MS: '0',
      ORDER_BATCH_MAX: '1',
      ORDER_HOLDS_MAX: '2',
      REBALANCE_WAIT_MS: '300',
      EXPIRY_SWEEP_MS: '250',
      DB_POOL_SIZE: '3',
      DB_TIMEOUT_MS: '700',
      REDIS_TIMEOUT_MS: '200',
      RETRY_AFTER_S: '3',
      HEADERS_TIMEOUT_MS: '3000',
      REQUEST_TIMEOUT_MS: '20000',
      MAX_CONNECTIONS_PER_IP: '0',
      PRODUCT_CACHE_MS: '0',
      DATA_DIR: '/var/lib/flashsale',
      LOG_LEVEL: 'warn',
      RATE_LIMIT_USER: '2,4',
      RATE_LIMIT_IP: '0',
      TRUST_PROXY: '10.0.0.0/8, 127.0.0.1',
      SOLD_OUT_STALE_MS: '250',
      SHED_LAG_MS: '50, 80,400',
      SHED_SAMPLE_MS: '20',
      SHED_ORDERS_IN_FLIGHT: '64',
      BUYER_JWT_SECRET: 'a-buyer-secret-of-thirty-two-chars!!',
      SHOP_TOKEN: 'a-long-enough-shop-token',
      ADMISSION_RATIO: '2.5',
      ADMISSION_TICK_MS: '40',
      QUEUE_BUCKET_MS: '250',
      ADMISSION_SECRET: 'an-admission-secret-of-32-characters',
      EVENTS_RETENTION_S: '3600',
      EVENTS_POLL_MS: '75',
      WEBHOOK_URL: 'https://shop.example/hooks/flashsale',
      WEBHOOK_SECRET: 'a-webhook-secret-of-32-characters!!',
      WEBHOOK_MAX_ATTEMPTS: '5',
      WEBHOOK_TIMEOUT_MS: '2500',
      WEBHOOK_BACKOFF_MS: '100',
      WEBHOOK_BATCH: '50',
      LIVE_STATS_MS: '0',
      POW_SECRET: 'a-proof-of-work-key-of-32-characters',
      POW_CHALLENGE_TTL_S: '30',
      POW_JOINS_PER_S: '250',
      POW_STEPS: '1000, 5000,25000',
      POW_EASE_S: '4',
    });
    expect(c).toEqual({
      http: {
        port: 8080,
        host: '127.0.0.1',
        workers: 4,
        retryAfterS: 3,
        headersTimeoutMs: 3000,
        requestTimeoutMs: 20_000,
        maxConnectionsPerIp: 0,
      },
      database: { url: 'postgres://u:p@db:5432/flashsale', poolSize: 3, timeoutMs: 700 },
      redis: { url: 'redis://cache:6379', lockUrls: undefined, timeoutMs: 200 },
      locks: {
        ttlMs: 500,
        userTtlMs: 900,
        extend: false,
        waitMs: 0,
        retryDelayMs: 7,
        retryJitterMs: 0,
        batchMax: 1,
        holdsMax: 2,
        holdMs: 20,
      },
      inventory: { productCacheMs: 0, rebalanceWaitMs: 300, expirySweepMs: 250 },
      admin: { token: 'a-long-enough-admin-token' },
      door: { rateLimitUser: '2,4', rateLimitIp: '0', trustProxy: ['10.0.0.0/8', '127.0.0.1'], soldOutStaleMs: 250 },
      overload: { lagMs: [50, 80, 400], sampleMs: 20, ordersInFlight: 64 },
      identity: {
        jwtSecret: 'a-buyer-secret-of-thirty-two-chars!!',
        jwtPublicKey: undefined,
        shopToken: 'a-long-enough-shop-token',
      },
      waitingRoom: {
        admissionRatio: 2.5,
        admissionTickMs: 40,
        bucketMs: 250,
        secret: 'an-admission-secret-of-32-characters',
      },
      proofOfWork: {
        secret: 'a-proof-of-work-key-of-32-characters',
        challengeTtlS: 30,
        joinsPerS: 250,
        steps: [1000, 5000, 25_000],
        easeS: 4,
      },
      events: {
        retentionS: 3600,
        pollMs: 75,
        webhookUrl: 'https://shop.example/hooks/flashsale',
        webhookSecret: 'a-webhook-secret-of-32-characters!!',
        webhookMaxAttempts: 5,
        webhookTimeoutMs: 2500,
        webhookBackoffMs: 100,
        webhookBatch: 50,
      },
      operator: { liveStatsMs: 0 },
      logging: { level: 'warn' },
      embedded: { dataDir: '/var/lib/flashsale' },
    });
  });

  it('should parse REDIS_LOCK_URLS as a comma-separated list, trimming spaces', () => {
    const c = loadConfig({ REDIS_LOCK_URLS: 'redis://a:6379, redis://b:6380,rediss://c:6381' });
    expect(c.redis.lockUrls).toEqual(['redis://a:6379', 'redis://b:6380', 'rediss://c:6381']);
    expect(loadConfig({ REDIS_LOCK_URLS: 'redis://only:6379' }).redis.lockUrls).toEqual(['redis://only:6379']);
  });

  it('should parse REDIS_CLUSTER_NODES as a comma-separated list of redis:// URLs', () => {
    const c = loadConfig({ REDIS_CLUSTER_NODES: 'redis://n1:7000, redis://n2:7001' });
    expect(c.redis.clusterNodes).toEqual(['redis://n1:7000', 'redis://n2:7001']);
    expect(() => loadConfig({ REDIS_CLUSTER_NODES: 'n1:7000' })).toThrow(
      /REDIS_CLUSTER_NODES \(value not shown\): REDIS_CLUSTER_NODES must be a comma-separated list of redis:\/\/ URLs/,
    );
  });

  it.each([
    ['REDIS_URL', 'redis://one:6379'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,redis://b:6379'],
  ])('should refuse REDIS_CLUSTER_NODES together with %s, naming both', (name, value) => {
    const both = () => loadConfig({ REDIS_CLUSTER_NODES: 'redis://n1:7000', [name]: value });
    expect(both).toThrow(ConfigurationError);
    expect(both).toThrow(new RegExp(`REDIS_CLUSTER_NODES and ${name} are both set`));
  });

  it('should trim integers and treat empty URLs and tokens as unset', () => {
    const c = loadConfig({ PORT: ' 4000 ', DATABASE_URL: '', REDIS_URL: '  ', ADMIN_TOKEN: '' });
    expect(c.http.port).toBe(4000);
    expect(c.database.url).toBeUndefined();
    expect(c.redis.url).toBeUndefined();
    expect(c.admin.token).toBeUndefined();
  });

  it.each([
    ['1', true],
    ['yes', true],
    ['ON', true],
    ['true', true],
    ['0', false],
    ['no', false],
    ['False', false],
  ])('should read LOCK_EXTEND=%s as %s', (value, expected) => {
    expect(loadConfig({ LOCK_EXTEND: value }).locks.extend).toBe(expected);
  });

  it('should turn load shedding off with SHED_LAG_MS=off, and take an empty value for the default', () => {
    expect(loadConfig({ SHED_LAG_MS: 'off' }).overload.lagMs).toEqual([]);
    expect(loadConfig({ SHED_LAG_MS: '' }).overload.lagMs).toEqual(loadConfig({}).overload.lagMs);
  });

  it('should ignore variables that are not its own', () => {
    expect(loadConfig({ PATH: '/usr/bin', HOME: '/root', NODE_ENV: 'production' }).http.port).toBe(3000);
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '-1'],
    ['PORT', '80.5'],
    ['PORT', '1e3'],
    ['WORKERS', '0'],
    ['WORKERS', '65'],
    ['ORDER_HOLD_MS', '-5'],
    ['ORDER_BATCH_MAX', '0'],
    ['ORDER_BATCH_MAX', '1001'],
    ['ORDER_HOLDS_MAX', '0'],
    ['ORDER_HOLDS_MAX', 'four'],
    ['LOG_LEVEL', 'foo'],
    ['LOG_LEVEL', 'INFO'],
    ['ADMIN_TOKEN', 'short'],
    ['ADMIN_TOKEN', 'fifteen-chars!!'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,http://b:6379'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,,redis://b:6379'],
    ['REDIS_LOCK_URLS', 'a:6379'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,'],
    ['DATABASE_URL', 'mysql://db/flashsale'],
    ['REDIS_URL', 'localhost:6379'],
    ['LOCK_TTL_MS', '10'],
    ['LOCK_WAIT_MS', 'soon'],
    ['LOCK_EXTEND', 'maybe'],
    ['RETRY_AFTER_S', '0'],
    ['LOG_LEVEL', 'verbose'],
    ['RATE_LIMIT_USER', 'five'],
    ['RATE_LIMIT_USER', '5,'],
    ['RATE_LIMIT_USER', '5,0'],
    ['RATE_LIMIT_USER', '-1'],
    ['RATE_LIMIT_IP', '1.5'],
    ['SOLD_OUT_STALE_MS', '5'],
    ['SHED_LAG_MS', '100,200'],
    ['SHED_LAG_MS', '300,200,400'],
    ['SHED_LAG_MS', '0,100,200'],
    ['SHED_LAG_MS', 'never'],
    ['SHED_SAMPLE_MS', '5'],
    ['SHED_ORDERS_IN_FLIGHT', '-1'],
    ['BUYER_JWT_SECRET', 'too-short-for-hs256'],
    ['BUYER_JWT_PUBLIC_KEY', 'not a pem'],
    ['SHOP_TOKEN', 'short'],
    ['ADMISSION_RATIO', '0.5'],
    ['ADMISSION_RATIO', 'lots'],
    ['ADMISSION_TICK_MS', '5'],
    ['QUEUE_BUCKET_MS', '5'],
    ['QUEUE_BUCKET_MS', '60001'],
    ['ADMISSION_SECRET', 'short'],
  ])('should refuse %s=%j with a message that names it', (name, value) => {
    const err = refusal({ [name]: value });
    if (SECRET_VARIABLES.has(name)) {
      expect(err.message).toContain(`${name} (value not shown)`);
      expect(err.message).not.toContain(value);
    } else {
      expect(err.message).toContain(`${name}=`);
      expect(err.message).toContain(JSON.stringify(value));
    }
  });

  it.each([
    ['ADMIN_TOKEN', 'shortsecre'],
    ['SHOP_TOKEN', 'shop-secret'],
    ['BUYER_JWT_SECRET', 'shortsecre'],
    ['ADMISSION_SECRET', 'a-secret-too-short'],
    ['WEBHOOK_SECRET', 'hook-secret'],
    ['DATABASE_URL', 'mysql://root:hunter2@db/flashsale'],
    ['REDIS_URL', 'user:hunter2@localhost:6379'],
  ])('should name %s and its rule but never print the refused value', (name, value) => {
    const env: NodeJS.ProcessEnv = { [name]: value };
    if (name === 'WEBHOOK_SECRET') env.WEBHOOK_URL = 'https://shop.example/hook';
    const err = refusal(env);
    expect(err.message).toContain(name);
    expect(err.message).toMatch(/must/);
    expect(err.message).not.toContain(value);
    expect(err.message).not.toContain('hunter2');
  });

  it('should refuse REQUEST_TIMEOUT_MS below HEADERS_TIMEOUT_MS', () => {
    expect(refusal({ HEADERS_TIMEOUT_MS: '8000', REQUEST_TIMEOUT_MS: '4000' }).message).toContain(
      'REQUEST_TIMEOUT_MS is below HEADERS_TIMEOUT_MS',
    );
  });

  it('should refuse BUYER_JWT_SECRET together with BUYER_JWT_PUBLIC_KEY, naming both', () => {
    const err = refusal({
      BUYER_JWT_SECRET: 's'.repeat(32),
      BUYER_JWT_PUBLIC_KEY: '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----',
    });
    expect(err.message).toContain('BUYER_JWT_SECRET and BUYER_JWT_PUBLIC_KEY are both set');
  });

  it('should refuse WEBHOOK_URL without a WEBHOOK_SECRET of 32 characters, and a URL that is not http(s)', () => {
    const url = 'https://shop.example/hook';
    expect(refusal({ WEBHOOK_URL: url }).message).toContain('WEBHOOK_SECRET must be set (at least 32 characters)');
    expect(refusal({ WEBHOOK_URL: url, WEBHOOK_SECRET: 'short' }).message).toContain(
      'WEBHOOK_SECRET must be at least 32 characters',
    );
    expect(refusal({ WEBHOOK_URL: 'ftp://shop.example/hook', WEBHOOK_SECRET: 's'.repeat(32) }).message).toContain(
      'WEBHOOK_URL must be an http:// or https:// URL',
    );
  });

  it('should speak of the variable, not of the property it is read into', () => {
    expect(refusal({ PORT: '70000' }).message).toContain('PORT="70000": PORT must not be greater than 65535');
    expect(refusal({ LOCK_TTL_MS: '10' }).message).toContain('LOCK_TTL_MS must not be less than 50');
  });

  it('should refuse POW_STEPS that do not rise, are not whole numbers, or are out of range, naming it', () => {
    for (const steps of ['5000,1000', '1000,abc', '50', '1000,1000', '']) {
      if (steps === '') continue;
      expect(() => loadConfig({ POW_STEPS: steps })).toThrow(/POW_STEPS=/);
    }
    expect(() => loadConfig({ POW_SECRET: 'short' })).toThrow(
      /POW_SECRET="short": POW_SECRET must be at least 32 characters/,
    );
  });

  it('should name every bad variable at once', () => {
    const err = refusal({ PORT: 'abc', WORKERS: '0', LOG_LEVEL: 'foo', PRODUCT_CACHE_MS: '1000' });
    expect(err.message).toMatch(/PORT=/);
    expect(err.message).toMatch(/WORKERS=/);
    expect(err.message).toMatch(/LOG_LEVEL=/);
    expect(err.message).not.toMatch(/PRODUCT_CACHE_MS=/);
  });

  it('should accept the bounds of each range', () => {
    const c = loadConfig({ PORT: '0', WORKERS: '64', ADMIN_TOKEN: 'x'.repeat(16), LOCK_WAIT_MS: '60000' });
    expect([c.http.port, c.http.workers, c.admin.token, c.locks.waitMs]).toEqual([0, 64, 'x'.repeat(16), 60_000]);
  });
});
