// Lab 3's billing worker in Node.js (ioredis, better-sqlite3), written from labs/lab3/README.md alone.
//   cd labs/lab3/examples/node && npm install     # better-sqlite3 may compile for a few minutes
//   make check-lab-3 WORKER="node labs/lab3/examples/node/worker.js"
// Measured once by hand: all 8 checks pass (about 110 s); in the crash mode `none` charged 13 events
// twice and `sqlite` none. The lab's tests do not run it (no Node.js in CI); they check its syntax.
"use strict";
const Redis = require("ioredis");
const Database = require("better-sqlite3");

function parseArgs() {
  const args = { sentinel: [] };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith("--")) continue;
    const name = argv[i].slice(2);
    const value = argv[i + 1];
    i++;
    if (name === "sentinel") args.sentinel.push(value);
    else args[name] = value;
  }
  const env = (n) => process.env["BILLING_" + n.toUpperCase().replace(/-/g, "_")];
  const get = (n, d) => args[n] ?? env(n) ?? d;
  const sentinels = args.sentinel.length ? args.sentinel : (env("sentinels") || "").split(",").filter(Boolean);
  return {
    sentinels: sentinels.map((s) => { const [host, port] = s.split(":"); return { host, port: Number(port) }; }),
    masterName: get("master-name", "mymaster"),
    stream: get("stream", "orders"),
    group: get("group", "billing"),
    consumer: get("consumer", `node-${process.pid}`),
    ledger: get("ledger", "ledger.sqlite3"),
    dedupe: get("dedupe", "sqlite"),
    delayMs: Number(get("handler-delay-ms", 50)),
    failEvery: Number(get("fail-every", 0)),
    maxAttempts: Number(get("max-attempts", 5)),
    minIdleMs: Number(get("min-idle-ms", 120000)),
    claimIntervalMs: Number(get("claim-interval-ms", 30000)),
    blockMs: Number(get("block-ms", 2000)),
    drainTimeoutS: Number(get("drain-timeout-s", 30)),
    ttlS: 7 * 24 * 3600,
  };
}

const a = parseArgs();
const transient = (err) => /^(READONLY|UNBLOCKED|LOADING|MASTERDOWN)/.test(err.message) ? 2 : false;
const options = { sentinels: a.sentinels, name: a.masterName, reconnectOnError: transient, maxRetriesPerRequest: null };
const redis = new Redis(options);
const reader = new Redis(options); // the blocking XREADGROUP gets its own connection
const db = new Database(a.ledger, { timeout: 30000 });
db.pragma("journal_mode = WAL");
db.exec(`
CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL,
  order_id TEXT NOT NULL, amount TEXT NOT NULL, msg_id TEXT NOT NULL, consumer TEXT NOT NULL, charged_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS applied_events (event_id TEXT PRIMARY KEY) WITHOUT ROWID;`);
const insertCharge = db.prepare("INSERT INTO charges(event_id, order_id, amount, msg_id, consumer, charged_at) VALUES (?,?,?,?,?,?)");
const claimEvent = db.prepare("INSERT OR IGNORE INTO applied_events(event_id) VALUES (?)");
const chargeOnce = db.transaction((id, f) => {
  const now = Date.now() / 1000;
  if (a.dedupe !== "sqlite" || claimEvent.run(f.event_id).changes === 1) {
    insertCharge.run(f.event_id, f.order_id, f.amount, id, a.consumer, now);
  }
});
const DEAD_LETTER = `local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3)) end
return acked`;

let attempts = 0;
let stopping = false;
const counts = { processed: 0, errors: 0, duplicates: 0, dead_lettered: 0, reclaimed: 0 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const marker = (f) => `processed:${a.stream}:${a.group}:${f.event_id}`;
const toFields = (flat) => { const f = {}; for (let i = 0; i < flat.length; i += 2) f[flat[i]] = flat[i + 1]; return f; };

function malformed(f) {
  for (const k of ["type", "order_id", "amount", "event_id"]) if (!f[k]) return `permanent: missing ${k}`;
  return Number(f.amount) > 0 ? null : `permanent: bad amount ${f.amount}`;
}

async function deadLetter(id, f, error, deliveries) {
  const flat = Object.entries({ ...f, id, error, attempts: String(deliveries) }).flat();
  if (await redis.eval(DEAD_LETTER, 2, a.stream, `${a.stream}:dlq`, a.group, id, ...flat)) counts.dead_lettered++;
}

async function handleOne(id, f, deliveries) {
  const bad = malformed(f);
  if (bad) return deadLetter(id, f, bad, deliveries);
  if (deliveries > a.maxAttempts) return deadLetter(id, f, `gave up: delivered ${deliveries} times`, deliveries);
  if (a.dedupe === "redis" && !(await redis.set(marker(f), "1", "EX", a.ttlS, "NX"))) {
    await redis.xack(a.stream, a.group, id);
    counts.duplicates++;
    return;
  }
  await sleep(a.delayMs);
  attempts++;
  if (a.failEvery && attempts % a.failEvery === 0) {
    counts.errors++;
    if (a.dedupe === "redis") await redis.del(marker(f));
    return; // no XACK: the rescuer brings it back
  }
  chargeOnce(id, f);
  await redis.xack(a.stream, a.group, id);
  counts.processed++;
}

async function handle(entries, deliveries) {
  await Promise.all(entries.map(([id, flat]) => handleOne(id, toFields(flat), deliveries.get(id) || 1)));
}

async function read() {
  const reply = await reader.xreadgroup("GROUP", a.group, a.consumer, "COUNT", 16, "BLOCK", a.blockMs, "STREAMS", a.stream, ">");
  if (!reply) return;
  await handle(reply[0][1], new Map());
}

async function rescue() {
  const [, claimed] = await redis.xautoclaim(a.stream, a.group, a.consumer, a.minIdleMs, "0-0", "COUNT", 100);
  const live = claimed.filter(([, flat]) => flat);
  if (!live.length) return;
  counts.reclaimed += live.length;
  const rows = await redis.xpending(a.stream, a.group, live[0][0], live[live.length - 1][0], live.length, a.consumer);
  await handle(live, new Map(rows.map(([id, , , n]) => [id, n])));
}

async function main() {
  process.on("SIGTERM", () => { stopping = true; });
  process.on("SIGINT", () => { stopping = true; });
  try { await redis.xgroup("CREATE", a.stream, a.group, "0", "MKSTREAM"); } catch (e) { if (!/^BUSYGROUP/.test(e.message)) throw e; }
  let nextRescue = 0;
  while (!stopping) {
    try {
      await read();
      if (Date.now() >= nextRescue) { nextRescue = Date.now() + a.claimIntervalMs; await rescue(); }
    } catch (e) {
      console.error(`redis error, retrying: ${e.message}`);
      await sleep(300);
    }
  }
  console.log(`drain complete: ${JSON.stringify(counts)}`);
  redis.disconnect(); reader.disconnect(); db.close();
  process.exit(0);
}

main();
