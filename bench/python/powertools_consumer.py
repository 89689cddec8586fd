"""The Powertools baseline for `make bench`: one SQS event through Powertools for AWS Lambda
(Python) `BatchProcessor` + `process_partial_response`, its documented API, with the same work
per record as resq's consumer: parse the body, validate it as resq's consumer does (docs/design.md, "Record checks"), a no-op effect.

Prints one JSON line: {"impl", "records", "failures", "batch_seconds", "seconds", "vm_hwm_kb"}:
`batch_seconds` is `process_partial_response` alone (the event already parsed, as the Lambda
runtime hands it over); `seconds` is the whole invocation (the event's JSON parse, the batch,
the response's JSON). Interpreter start and imports are in neither.
"""

import json
import sys
import time

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

MAX_ORDER_ID_LEN = 128

processor = BatchProcessor(event_type=EventType.SQS)


class Rejected(Exception):
    """A permanent failure: MALFORMED_JSON or VALIDATION_FAILED."""


def kind(value):
    return type(value).__name__


def non_empty_string(obj, field, problems):
    value = obj.get(field)
    if value is None:
        problems.append(f"{field} is missing")
    elif not isinstance(value, str):
        problems.append(f"{field} must be a string, got {kind(value)}")
    elif not value:
        problems.append(f"{field} must not be empty")
    else:
        return value
    return None


def order_id_problem(raw):
    if not raw:
        return "orderId must not be empty"
    if len(raw) > MAX_ORDER_ID_LEN:
        return f"orderId is {len(raw)} characters long; at most {MAX_ORDER_ID_LEN} are allowed"
    for c in raw:
        if not ("!" <= c <= "~") or c in "/\\":
            return f"orderId contains {c!r}; only printable ASCII without spaces, '/' or '\\' is allowed"
    return None


def validate(document):
    if not isinstance(document, dict):
        raise Rejected(f"VALIDATION_FAILED: an order must be a JSON object, got {kind(document)}")
    problems = []
    order_id = document.get("orderId")
    if order_id is None:
        problems.append("orderId is missing")
    elif not isinstance(order_id, str):
        problems.append(f"orderId must be a string, got {kind(order_id)}")
    else:
        p = order_id_problem(order_id)
        if p:
            problems.append(p)
    non_empty_string(document, "userId", problems)
    items = document.get("items")
    if items is None:
        problems.append("items is missing")
    elif not isinstance(items, list):
        problems.append(f"items must be an array, got {kind(items)}")
    elif not items:
        problems.append("items must not be empty")
    else:
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                problems.append(f"items[{i}].item must be an object, got {kind(item)}")
                continue
            item_problems = []
            non_empty_string(item, "productId", item_problems)
            q = item.get("quantity")
            if q is None:
                item_problems.append("quantity is missing")
            elif isinstance(q, bool) or not isinstance(q, int) or q < 1:
                item_problems.append(f"quantity must be a positive integer, got {q!r}")
            problems.extend(f"items[{i}].{p}" for p in item_problems)
    if problems:
        raise Rejected("VALIDATION_FAILED: " + "; ".join(problems))
    return document


def parse(record: SQSRecord):
    """The record's body as a valid order, or `Rejected` (what every peer's handler does first)."""
    try:
        document = json.loads(record.body)
    except ValueError as e:
        raise Rejected(f"MALFORMED_JSON: body is not JSON: {e}") from e
    return validate(document)


def record_handler(record: SQSRecord):
    parse(record)
    # The effect: an in-memory no-op, as in resq's benchmark.


def vm_hwm_kb():
    """Peak resident set size of this process, in KiB (the kernel's VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def warm(path, invocations):
    """`invocations` invocations in this process (the first a warm-up): lists of times per
    invocation, and VmHWM after the first (one invocation's peak)."""
    with open(path, "rb") as f:
        raw = f.read()
    batch, whole, hwm, failures, records = [], [], 0, 0, 0
    for i in range(max(1, invocations)):
        started = time.perf_counter()
        event = json.loads(raw)
        batch_started = time.perf_counter()
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=None
        )
        batch.append(time.perf_counter() - batch_started)
        out = json.dumps(response)
        whole.append(time.perf_counter() - started)
        if i == 0:
            hwm = vm_hwm_kb()
        records = len(event["Records"])
        failures = len(json.loads(out)["batchItemFailures"])
        del event, response
    print(
        json.dumps(
            {
                "impl": "powertools",
                "records": records,
                "failures": failures,
                "batch_seconds": batch,
                "seconds": whole,
                "vm_hwm_kb": hwm,
            }
        )
    )


def main():
    if len(sys.argv) > 2:
        # `powertools_consumer.py EVENT N`: N warm invocations in one process
        warm(sys.argv[1], int(sys.argv[2]))
        return
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    started = time.perf_counter()
    event = json.loads(raw)
    del raw  # the runtime keeps only the parsed event
    batch_started = time.perf_counter()
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=None
    )
    batch_seconds = time.perf_counter() - batch_started
    out = json.dumps(response)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "impl": "powertools",
                "records": len(event["Records"]),
                "failures": len(json.loads(out)["batchItemFailures"]),
                "batch_seconds": batch_seconds,
                "seconds": seconds,
                "vm_hwm_kb": vm_hwm_kb(),
            }
        )
    )


if __name__ == "__main__":
    main()
