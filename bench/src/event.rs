//! The consumer benchmark's input: one SQS event of ~300-byte orders, shaped as Lambda's SQS
//! poller delivers it, with a share of malformed and invalid bodies.

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use rand::SeedableRng;
use rand::rngs::StdRng;
use resq_ops::orders::{self, Kind};
use serde_json::{Value, json};

/// Queue the records claim to come from.
pub const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:resq-orders";

/// The event and how many of its records are not valid orders.
pub struct BenchEvent {
    /// `{"Records": [...]}`.
    pub event: Value,
    /// Records whose body is malformed or invalid (what both consumers must reject).
    pub rejected: usize,
}

/// `records` records; `bad_pct` % of them malformed or invalid (half each), from a fixed seed.
pub fn sqs_event(records: usize, bad_pct: f64, seed: u64) -> BenchEvent {
    build("bench-", records, bad_pct, seed, None, false)
}

/// `records` records, every one rejected: order-sized bodies (the valid orders above, padded
/// the same way) whose first item has `quantity: 0`, so each fails validation
/// (`VALIDATION_FAILED`) and gets a DLQ copy, which the consumer holds until it settles.
pub fn sqs_rejected_event(records: usize, seed: u64) -> BenchEvent {
    build("bench-", records, 0.0, seed, None, true)
}

/// The largest event `build(n)` makes that fits in `max_bytes` (serialized), and its bytes.
pub fn largest_within(
    max_bytes: usize,
    build: impl Fn(usize) -> BenchEvent,
) -> Result<(BenchEvent, Vec<u8>), String> {
    let bytes_of = |e: &BenchEvent| serde_json::to_vec(&e.event).map_err(|e| e.to_string());
    let per_record = bytes_of(&build(100))?.len().div_ceil(100).max(1);
    let mut n = (max_bytes / per_record).max(1);
    loop {
        let e = build(n);
        let bytes = bytes_of(&e)?;
        if bytes.len() <= max_bytes || n == 1 {
            return Ok((e, bytes));
        }
        n -= n / 100 + 1;
    }
}

/// `records` valid orders whose `orderId`s all start with `prefix` (`{prefix}000000`, …): one
/// event per invocation with a prefix of its own makes every order record a new object.
pub fn valid_orders(records: usize, prefix: &str, seed: u64) -> BenchEvent {
    build(prefix, records, 0.0, seed, None, false)
}

/// The FIFO queue the FIFO records claim to come from.
pub const FIFO_QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:resq-orders.fifo";

/// `records` valid orders from a FIFO queue, dealt round-robin over `groups` message groups
/// (each with its deduplication id and sequence number, as the poller delivers them).
pub fn sqs_fifo_event(records: usize, groups: usize, seed: u64) -> BenchEvent {
    build("bench-", records, 0.0, seed, Some(groups.max(1)), false)
}

fn build(
    prefix: &str,
    records: usize,
    bad_pct: f64,
    seed: u64,
    groups: Option<usize>,
    reject_all: bool,
) -> BenchEvent {
    let mut rng = StdRng::seed_from_u64(seed);
    let generated = orders::generate(prefix, records, bad_pct / 2.0, bad_pct / 2.0, &mut rng);
    let sent_at = chrono::Utc::now().timestamp_millis().to_string();
    let rejected = match reject_all {
        true => generated.len(),
        false => generated.iter().filter(|o| o.kind != Kind::Valid).count(),
    };
    let messages: Vec<Message> = generated
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let body = if reject_all {
                zero_quantity(&padded(&o.body))
            } else if o.kind == Kind::Valid {
                padded(&o.body)
            } else {
                o.body
            };
            let message = Message::builder()
                .message_id(format!("00000000-0000-4000-8000-{i:012}"))
                .receipt_handle(format!("AQEB{i:08}bench{}", "r".repeat(120)))
                .md5_of_body(format!("{:032x}", i))
                .body(body)
                .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1")
                .attributes(MessageSystemAttributeName::SentTimestamp, &sent_at)
                .attributes(
                    MessageSystemAttributeName::SenderId,
                    "AIDAIENQZJOLO23YVJ4VO",
                )
                .attributes(
                    MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                    &sent_at,
                );
            match groups {
                None => message,
                Some(g) => message
                    .attributes(
                        MessageSystemAttributeName::MessageGroupId,
                        format!("group-{}", i % g),
                    )
                    .attributes(
                        MessageSystemAttributeName::MessageDeduplicationId,
                        format!("dedup-{i}"),
                    )
                    .attributes(
                        MessageSystemAttributeName::SequenceNumber,
                        format!("{:020}", i + 1),
                    ),
            }
            .build()
        })
        .collect();
    let arn = if groups.is_some() {
        FIFO_QUEUE_ARN
    } else {
        QUEUE_ARN
    };
    BenchEvent {
        event: resq_local::event::lambda_event(&messages, arn, "us-east-1"),
        rejected,
    }
}

/// A valid order grown to about 300 bytes with the fields a real order carries.
fn padded(body: &str) -> String {
    let Ok(mut order) = serde_json::from_str::<Value>(body) else {
        return body.to_owned();
    };
    order["shippingAddress"] = json!({
        "name": "Ada Lovelace",
        "street": "12 St James's Square",
        "city": "London",
        "postcode": "SW1Y 4JH",
        "country": "GB",
    });
    order["createdAt"] = json!("2026-11-22T01:02:03Z");
    order.to_string()
}

/// An order whose first item asks for none: the same size, but not a valid order.
fn zero_quantity(body: &str) -> String {
    let Ok(mut order) = serde_json::from_str::<Value>(body) else {
        return body.to_owned();
    };
    order["items"][0]["quantity"] = json!(0);
    order.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_parses_and_rejects_what_it_says() {
        let e = sqs_event(400, 5.0, 7);
        let records = e.event["Records"].as_array().unwrap();
        assert_eq!(records.len(), 400);
        let rejected = records
            .iter()
            .filter(|r| resq_consumer::order::parse_order(r["body"].as_str()).is_err())
            .count();
        assert_eq!(rejected, e.rejected);
        assert!((5..=40).contains(&rejected), "{rejected}");
        let valid_len: Vec<usize> = records
            .iter()
            .filter_map(|r| r["body"].as_str())
            .filter(|b| resq_consumer::order::parse_order(Some(b)).is_ok())
            .map(str::len)
            .collect();
        let mean = valid_len.iter().sum::<usize>() / valid_len.len();
        assert!((250..=350).contains(&mean), "mean valid body {mean} bytes");
    }

    #[test]
    fn valid_orders_carry_the_prefix_and_all_pass() {
        let e = valid_orders(50, "r3-", 7);
        let records = e.event["Records"].as_array().unwrap();
        assert_eq!((records.len(), e.rejected), (50, 0));
        let ids: std::collections::HashSet<String> = records
            .iter()
            .map(|r| {
                let order = resq_consumer::order::parse_order(r["body"].as_str()).unwrap();
                order.order_id.to_string()
            })
            .collect();
        assert_eq!(ids.len(), 50);
        assert!(ids.iter().all(|id| id.starts_with("r3-")), "{ids:?}");
    }

    #[test]
    fn the_fifo_event_deals_valid_orders_over_its_groups() {
        let e = sqs_fifo_event(10, 2, 7);
        let records = e.event["Records"].as_array().unwrap();
        assert_eq!(e.rejected, 0);
        let groups: Vec<&str> = records
            .iter()
            .map(|r| r["attributes"]["MessageGroupId"].as_str().unwrap())
            .collect();
        assert_eq!(groups.iter().filter(|g| **g == "group-0").count(), 5);
        assert_eq!(groups.iter().filter(|g| **g == "group-1").count(), 5);
        assert!(
            records
                .iter()
                .all(|r| r["eventSourceARN"] == FIFO_QUEUE_ARN)
        );
        let read = resq_consumer::event::SqsInvocation::from_json(&e.event.to_string()).unwrap();
        assert!(resq_consumer::event::is_fifo(&read.0));
        assert_eq!(resq_consumer::decide::plan_lanes(&read.0, true).len(), 2);
    }

    #[test]
    fn the_rejected_event_is_order_sized_and_every_record_fails_validation() {
        let e = sqs_rejected_event(200, 7);
        let records = e.event["Records"].as_array().unwrap();
        assert_eq!((records.len(), e.rejected), (200, 200));
        for r in records {
            let body = r["body"].as_str().unwrap();
            assert!((250..=350).contains(&body.len()), "{body}");
            let err = resq_consumer::order::parse_order(Some(body)).unwrap_err();
            assert!(format!("{err:?}").contains("quantity"), "{err:?}");
        }
    }

    #[test]
    fn the_largest_event_within_a_size_fits_it_and_one_more_record_would_not() {
        let (e, bytes) = largest_within(60_000, |n| sqs_rejected_event(n, 7)).unwrap();
        let n = e.event["Records"].as_array().unwrap().len();
        assert!(bytes.len() <= 60_000);
        // the search steps down by about 1 % at a time: 2 % more records would not fit
        let more = serde_json::to_vec(&sqs_rejected_event(n + n / 50 + 2, 7).event).unwrap();
        assert!(more.len() > 60_000, "{n} records, {} bytes", bytes.len());
    }
}
