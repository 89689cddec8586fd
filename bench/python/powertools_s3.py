"""The real-client peers of `make bench`'s I/O comparison: SQS events through Powertools for AWS
Lambda (Python) whose record handler does what resq's reference handler does: parse the body,
validate it (as `powertools_consumer.py` does), then record the order once with a conditional
S3 put of `orders/{orderId}.json` (`IfNoneMatch="*"`; an existing object, 412, means already
done, as resq treats it). S3 is the bench's loopback stand-in (`bench/src/s3standin.rs`), over
TLS: its CA is trusted as a user's would be, through `AWS_CA_BUNDLE`, which the bench sets.

    powertools_s3.py async|sync ENDPOINT BUCKET POOL

`async`: `AsyncBatchProcessor` + `async_process_partial_response` with an aiobotocore S3 client
whose `max_pool_connections` is POOL (`default`: left unset, botocore's 10). `sync`:
`BatchProcessor` + `process_partial_response` with a boto3 S3 client at its defaults (POOL is
ignored). Both: path-style addressing and the endpoint set explicitly, region us-east-1, dummy
credentials, everything else at the client's defaults (retries included).

Warm, as a Lambda instance is: the client is built once, then event files are read from stdin,
one path a line; for each, one JSON line on stdout: {"impl", "records", "failures",
"batch_seconds", "retries", "vm_hwm_kb"} (`retries`: botocore's own retries of the puts, from
each response's `RetryAttempts`). `batch_seconds` is the invocation as the handler sees it: the
event's JSON parse (the runtime's, before the handler), the batch, the response's JSON; the
file's read is not in it.
"""

import asyncio
import json
import os
import sys
import time

# Powertools' AsyncBatchProcessor runs each batch on the process's one event loop only under
# Lambda (it looks for LAMBDA_TASK_ROOT); elsewhere it calls asyncio.run, a new loop per batch,
# which a client built once (its aiohttp session bound to one loop) cannot survive.
os.environ.setdefault("LAMBDA_TASK_ROOT", "/var/task")
for k, v in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[k] = v

from aws_lambda_powertools.utilities.batch import (  # noqa: E402
    AsyncBatchProcessor,
    BatchProcessor,
    EventType,
    async_process_partial_response,
    process_partial_response,
)
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

from powertools_consumer import parse, vm_hwm_kb  # noqa: E402


def put_args(bucket, order, record):
    """The conditional put of an order's record, as resq's reference handler makes it."""
    return dict(
        Bucket=bucket,
        Key=f"orders/{order['orderId']}.json",
        Body=order_record(order, record),
        ContentType="application/json",
        IfNoneMatch="*",
    )


def order_record(order, record):
    """What resq's reference handler writes: the order, its message id, when."""
    return json.dumps(
        {
            "order": order,
            "messageId": record.message_id,
            "recordedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    ).encode()


RETRIES = [0]


def count_retries(response):
    """botocore's own retries of a call (connection errors, 5xx, throttling)."""
    RETRIES[0] += response.get("ResponseMetadata", {}).get("RetryAttempts", 0)


def already_done(error):
    """A conditional put that found the object: the order was recorded before."""
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 412 or error.response.get("Error", {}).get("Code") == "PreconditionFailed"


def client_config(pool):
    kwargs = {"s3": {"addressing_style": "path"}}
    if pool != "default":
        kwargs["max_pool_connections"] = int(pool)
    return Config(**kwargs)


def run(handle, path):
    with open(path, "rb") as f:
        raw = f.read()
    started = time.perf_counter()
    event = json.loads(raw)
    response = handle(event)
    json.dumps(response)
    seconds = time.perf_counter() - started
    return {
        "records": len(event["Records"]),
        "failures": len(response["batchItemFailures"]),
        "batch_seconds": seconds,
    }


def main():
    mode, endpoint, bucket, pool = sys.argv[1:5]
    if mode == "async":
        from aiobotocore.session import get_session

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        context = get_session().create_client(
            "s3", region_name="us-east-1", endpoint_url=endpoint, config=client_config(pool)
        )
        client = loop.run_until_complete(context.__aenter__())

        async def record_handler(record):
            order = parse(record)
            try:
                count_retries(
                    await client.put_object(**put_args(bucket, order, record))
                )
            except ClientError as e:
                count_retries(e.response)
                if not already_done(e):
                    raise

        def handle(event):
            return async_process_partial_response(
                event=event,
                record_handler=record_handler,
                processor=AsyncBatchProcessor(event_type=EventType.SQS),
                context=None,
            )

        impl = f"powertools-async-aiobotocore-pool-{pool}"
    elif mode == "sync":
        import boto3

        client = boto3.client(
            "s3", region_name="us-east-1", endpoint_url=endpoint, config=client_config("default")
        )

        def record_handler(record):
            order = parse(record)
            try:
                count_retries(
                    client.put_object(**put_args(bucket, order, record))
                )
            except ClientError as e:
                count_retries(e.response)
                if not already_done(e):
                    raise

        processor = BatchProcessor(event_type=EventType.SQS)

        def handle(event):
            return process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=None
            )

        impl = "powertools-sync-boto3"
    else:
        sys.exit(f"mode must be async or sync, not {mode!r}")

    print(json.dumps({"impl": impl, "ready": True}), flush=True)
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        RETRIES[0] = 0
        out = run(handle, path)
        out["impl"] = impl
        out["retries"] = RETRIES[0]
        out["vm_hwm_kb"] = vm_hwm_kb()
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
