"""The hand-written redriver resq is measured against in `make bench`: the common design of a
Python/boto3 function that receives 10 messages at a time and, for each, calls `send_message`
once and sleeps 1/rate, then deletes the received batch. Runs until the DLQ is empty.

Usage: baseline_redriver.py ENDPOINT DLQ_URL MAIN_QUEUE_URL RATE
Prints one JSON line: {"impl", "redriven", "seconds"}.
"""

import json
import sys
import time

import boto3


def main():
    endpoint, dlq_url, main_url, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    redriven = 0
    started = time.perf_counter()
    while True:
        received = sqs.receive_message(
            QueueUrl=dlq_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageAttributeNames=["All"],
        )
        messages = received.get("Messages", [])
        if not messages:
            break
        for m in messages:
            kwargs = {"QueueUrl": main_url, "MessageBody": m["Body"]}
            if m.get("MessageAttributes"):
                kwargs["MessageAttributes"] = m["MessageAttributes"]
            sqs.send_message(**kwargs)
            redriven += 1
            time.sleep(1.0 / rate)
        sqs.delete_message_batch(
            QueueUrl=dlq_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )
    seconds = time.perf_counter() - started
    print(json.dumps({"impl": "baseline", "redriven": redriven, "seconds": seconds}))


if __name__ == "__main__":
    main()
