// The Node peer of `make bench`'s real-client I/O comparison: SQS events through Powertools for
// AWS Lambda (TypeScript) `BatchProcessor` + `processPartialResponse` (records handled
// concurrently, its default), whose record handler does what resq's reference handler and the
// Python peers (bench/python/powertools_s3.py) do: parse the body, validate it, then record the
// order once with a conditional S3 put of `orders/{orderId}.json` (`IfNoneMatch: "*"`; 412, an
// existing object, means already done).
//
//     node peer.js ENDPOINT BUCKET
//
// The AWS SDK v3 `S3Client` at its defaults (its HTTPS agent keeps up to 50 sockets; retries,
// checksums as shipped), path-style addressing and the endpoint set explicitly. The stand-in's CA
// is trusted the way a user would: `NODE_EXTRA_CA_CERTS`.
//
// Warm, as a Lambda instance is: the client is built once, then event files are read from stdin,
// one path a line; for each, one JSON line on stdout: {"impl", "records", "failures",
// "batch_seconds", "retries", "vm_hwm_kb"}; `batch_seconds` is the event's JSON parse, the batch
// and the response's JSON (the file's read is not in it).
"use strict";

const fs = require("node:fs");
const readline = require("node:readline");
const {
  BatchProcessor,
  EventType,
  processPartialResponse,
} = require("@aws-lambda-powertools/batch");
const { S3Client, PutObjectCommand } = require("@aws-sdk/client-s3");

// as the Lambda runtime gives them (the credentials are the stand-in's dummies)
Object.assign(process.env, {
  AWS_ACCESS_KEY_ID: "testing",
  AWS_SECRET_ACCESS_KEY: "testing",
  AWS_REGION: "us-east-1",
});

const MAX_ORDER_ID_LEN = 128;

class Rejected extends Error {}

const kind = (v) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

function nonEmptyString(obj, field, problems) {
  const value = obj[field];
  if (value === undefined || value === null) problems.push(`${field} is missing`);
  else if (typeof value !== "string") problems.push(`${field} must be a string, got ${kind(value)}`);
  else if (value === "") problems.push(`${field} must not be empty`);
}

function orderIdProblem(raw) {
  if (!raw) return "orderId must not be empty";
  if (raw.length > MAX_ORDER_ID_LEN)
    return `orderId is ${raw.length} characters long; at most ${MAX_ORDER_ID_LEN} are allowed`;
  for (const c of raw) {
    if (c < "!" || c > "~" || c === "/" || c === "\\")
      return `orderId contains ${JSON.stringify(c)}; only printable ASCII without spaces, '/' or '\\' is allowed`;
  }
  return null;
}

// The checks of bench/python/powertools_consumer.py's `validate` (resq's "Record checks").
function validate(doc) {
  if (kind(doc) !== "object")
    throw new Rejected(`VALIDATION_FAILED: an order must be a JSON object, got ${kind(doc)}`);
  const problems = [];
  const id = doc.orderId;
  if (id === undefined || id === null) problems.push("orderId is missing");
  else if (typeof id !== "string") problems.push(`orderId must be a string, got ${kind(id)}`);
  else {
    const p = orderIdProblem(id);
    if (p) problems.push(p);
  }
  nonEmptyString(doc, "userId", problems);
  const items = doc.items;
  if (items === undefined || items === null) problems.push("items is missing");
  else if (!Array.isArray(items)) problems.push(`items must be an array, got ${kind(items)}`);
  else if (items.length === 0) problems.push("items must not be empty");
  else
    items.forEach((item, i) => {
      if (kind(item) !== "object") {
        problems.push(`items[${i}].item must be an object, got ${kind(item)}`);
        return;
      }
      const own = [];
      nonEmptyString(item, "productId", own);
      const q = item.quantity;
      if (q === undefined || q === null) own.push("quantity is missing");
      else if (!Number.isInteger(q) || q < 1)
        own.push(`quantity must be a positive integer, got ${JSON.stringify(q)}`);
      for (const p of own) problems.push(`items[${i}].${p}`);
    });
  if (problems.length) throw new Rejected(`VALIDATION_FAILED: ${problems.join("; ")}`);
  return doc;
}

function parse(record) {
  let doc;
  try {
    doc = JSON.parse(record.body);
  } catch (e) {
    throw new Rejected(`MALFORMED_JSON: body is not JSON: ${e.message}`);
  }
  return validate(doc);
}

async function main() {
  const [endpoint, bucket] = process.argv.slice(2);
  const client = new S3Client({ region: "us-east-1", endpoint, forcePathStyle: true });
  const processor = new BatchProcessor(EventType.SQS);
  let retries = 0;
  const recordHandler = async (record) => {
    const order = parse(record);
    const body = JSON.stringify({
      order,
      messageId: record.messageId,
      recordedAt: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
    });
    try {
      const out = await client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: `orders/${order.orderId}.json`,
          Body: body,
          ContentType: "application/json",
          IfNoneMatch: "*",
        }),
      );
      retries += (out.$metadata.attempts ?? 1) - 1;
    } catch (e) {
      retries += (e.$metadata?.attempts ?? 1) - 1;
      if (e.$metadata?.httpStatusCode !== 412 && e.name !== "PreconditionFailed") throw e;
    }
  };
  const impl = "powertools-ts-batch-sdk-v3";
  process.stdout.write(`${JSON.stringify({ impl, ready: true })}\n`);
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const path = line.trim();
    if (!path) continue;
    const raw = fs.readFileSync(path);
    retries = 0;
    const started = process.hrtime.bigint();
    const event = JSON.parse(raw);
    const response = await processPartialResponse(event, recordHandler, processor);
    JSON.stringify(response);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const status = fs.readFileSync("/proc/self/status", "utf8");
    const hwm = /VmHWM:\s+(\d+)/.exec(status);
    const out = {
      impl,
      records: event.Records.length,
      failures: response.batchItemFailures.length,
      batch_seconds: seconds,
      retries,
      vm_hwm_kb: hwm ? Number(hwm[1]) : 0,
    };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
