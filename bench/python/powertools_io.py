"""The Powertools side of `make bench`'s I/O comparison: one SQS event through Powertools for
AWS Lambda (Python) with a record handler doing the same work as resq's consumer (parse the
body, validate it) plus an effect that takes `latency_ms` of I/O wait, as a conditional S3 put
does. The wait is a sleep in this process (no server), as resq's side is a sleep in its port.

    powertools_io.py EVENT LATENCY_MS sync|async|fifo

`sync`: `BatchProcessor` + `process_partial_response`, the records one after another (its
documented API). `async`: `AsyncBatchProcessor` + `async_process_partial_response`, the records
as asyncio tasks gathered at once (unbounded concurrency, its documented API). `fifo`:
`SqsFifoPartialProcessor` + `process_partial_response`, Powertools' processor for FIFO queues
(the records one after another, in order; `AsyncBatchProcessor` does not keep a group's order).

Prints one JSON line: {"impl", "records", "failures", "batch_seconds"}; `batch_seconds` is the
batch alone (the event already parsed, as the Lambda runtime hands it over).
"""

import asyncio
import json
import sys
import time

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    async_process_partial_response,
    process_partial_response,
)

from powertools_consumer import parse


def main():
    path, latency_ms, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    latency = latency_ms / 1000.0
    with open(path, "rb") as f:
        event = json.loads(f.read())

    def record_handler(record):
        parse(record)
        time.sleep(latency)

    async def async_record_handler(record):
        parse(record)
        await asyncio.sleep(latency)

    started = time.perf_counter()
    if mode == "sync":
        response = process_partial_response(
            event=event,
            record_handler=record_handler,
            processor=BatchProcessor(event_type=EventType.SQS),
            context=None,
        )
    elif mode == "async":
        response = async_process_partial_response(
            event=event,
            record_handler=async_record_handler,
            processor=AsyncBatchProcessor(event_type=EventType.SQS),
            context=None,
        )
    elif mode == "fifo":
        response = process_partial_response(
            event=event,
            record_handler=record_handler,
            processor=SqsFifoPartialProcessor(),
            context=None,
        )
    else:
        sys.exit(f"mode must be sync, async or fifo, not {mode!r}")
    batch_seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "impl": f"powertools-{mode}",
                "records": len(event["Records"]),
                "failures": len(response["batchItemFailures"]),
                "batch_seconds": batch_seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
