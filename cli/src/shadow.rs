//! `resq dlq redrive --to QUEUE --keep-source`: a shadow replay. The selected DLQ messages are
//! copied to a staging queue exactly as a replay would send them to the main queue (the
//! redriver's own rules decide which would be replayed, and its own copy is sent: failure
//! marks dropped, `x-redrive-count` + 1, `x-first-sent-at` carried, FIFO group and
//! deduplication id), so a staging consumer sees what production would. The DLQ is left as it
//! was: nothing is deleted, every message received is released at the end, kept messages
//! made visible for the copy are hidden again until the moment they were hidden until, and
//! no message's `x-redrive-count` changes (the copy carries the count a replay would).
//!
//! A copy counts only when SQS reported its send `Successful`.
//!
//! Why `--to` needs `--keep-source` (and is refused without it): moving messages out of the
//! DLQ into a queue that is not the main queue would take them out of resq's care (a staging
//! queue has no redrive cap, no archive and its own retention): a message could end nowhere
//! resq knows of. A real move is `resq dlq redrive` without `--to`, into the main queue.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use resq::keep::KeptMessage;
use resq::settle::{Action, Confirmation, Deadlines, Plan, QueueUrl, Settler, Unpaced};
use resq::sqs::{OutgoingMessage, Queues, ReceivedMessage};
use resq::store::S3Store;
use resq_redriver::classify::{self, Decision, Keep, Rules};
use resq_redriver::plan::PendingKeep;
use resq_redriver::ratelimit::ReplayPace;
use serde::Serialize;

use crate::CliError;
use crate::context::Context;
use crate::dlq::RedriveOptions;

/// What the shadow replay does with one DLQ message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shadow {
    /// Copy it: the replay the redriver would send.
    Copy(OutgoingMessage),
    /// Leave it: why a replay would not send it (`kept`, `notSelected`, or the archive
    /// reason it would be archived for).
    Skip(String),
}

/// The shadow of one message under `rules` at `now_ms`, into a queue that is FIFO or not:
/// the redriver's decision (`classify`) and its copy (`replay`), nothing of its own.
pub fn decide(m: &ReceivedMessage, rules: &Rules, now_ms: u64, to_fifo: bool) -> Shadow {
    match classify::classify(m, rules, now_ms) {
        Decision::Redrive => match classify::replay(m, to_fifo) {
            Ok(copy) => Shadow::Copy(copy),
            Err(reason) => Shadow::Skip(reason.code().to_owned()),
        },
        Decision::Archive(reason) => Shadow::Skip(reason.code().to_owned()),
        Decision::Keep(Keep::Permanent) => Shadow::Skip("kept".to_owned()),
        Decision::Keep(Keep::NotSelected) => Shadow::Skip("notSelected".to_owned()),
        Decision::Keep(Keep::Paused) => Shadow::Skip("paused".to_owned()),
    }
}

/// Refuses a staging queue that is not one: the main queue (the copies would be real replays,
/// and the DLQ would keep its messages: every order twice), the DLQ itself, or any queue that
/// dead-letters into this DLQ (a production source). `dlq_arn`, `to_dead_letter_target`: the
/// DLQ's ARN and the staging queue's RedrivePolicy target, when known.
pub fn check_staging(
    to: &str,
    main_queue: Option<&str>,
    dlq: &str,
    dlq_arn: Option<&str>,
    to_dead_letter_target: Option<&str>,
) -> Result<(), CliError> {
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let why = if same(to, dlq) {
        Some("is the DLQ itself")
    } else if main_queue.is_some_and(|m| same(to, m)) {
        Some(
            "is the main queue: the copies would be real replays while the DLQ keeps its messages (every order twice); `resq dlq redrive` without --to replays for real",
        )
    } else if dlq_arn.is_some() && dlq_arn == to_dead_letter_target {
        Some("dead-letters into this DLQ: it is a production source queue, not a staging queue")
    } else {
        None
    };
    match why {
        Some(why) => Err(CliError::Usage(format!("--to {to} {why}"))),
        None => Ok(()),
    }
}

/// One copy made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Copied {
    /// The DLQ message copied.
    pub dlq_message_id: String,
    /// The copy's id in the staging queue.
    pub message_id: Option<String>,
    /// The body's `orderId`, when it has one.
    pub order_id: Option<String>,
}

/// One copy not made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotCopied {
    /// The DLQ message.
    pub dlq_message_id: String,
    /// Why: what SQS said, or that the send was not answered (it may have gone).
    pub error: String,
}

/// What a shadow replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    /// The staging queue.
    pub to: String,
    /// DLQ messages received (each once).
    pub received: u64,
    /// Copies SQS reported `Successful`.
    pub copied: u64,
    /// Messages a replay would not send, by why (`kept`, `notSelected`, an archive reason).
    pub skipped: BTreeMap<String, u64>,
    /// The copies.
    pub copies: Vec<Copied>,
    /// The copies that failed.
    pub failed: Vec<NotCopied>,
    /// Kept messages of the selected reason made visible for the copy.
    pub unhidden: u64,
    /// Of those received, kept messages hidden again until the moment they were hidden
    /// until.
    pub hidden_again: u64,
    /// Messages received and released at once (visible again).
    pub released: u64,
    /// Messages whose release (or hide again) failed: they come back by themselves after the
    /// receive's visibility timeout.
    pub not_released: u64,
    /// The copy budget was reached: more messages may be waiting.
    pub budget_reached: bool,
}

impl ShadowReport {
    /// The error the command ends with when some copies failed.
    pub fn failure(&self) -> Option<CliError> {
        (!self.failed.is_empty()).then_some(CliError::NotCopied {
            count: self.failed.len() as u64,
        })
    }
}

fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}

/// How long the shadow hides what it receives: the time its budget takes at its rate, and a
/// minute, within SQS's 12 h (everything is released at the end).
pub fn hide_for(max_messages: u32, rate_per_second: f64) -> i32 {
    let run = f64::from(max_messages) / rate_per_second.max(f64::MIN_POSITIVE);
    (run.ceil() + 60.0).clamp(60.0, resq::backoff::MAX_VISIBILITY_TIMEOUT.as_secs() as f64) as i32
}

/// The shadow replay: checks the staging queue, copies, then leaves the DLQ as it found it.
pub async fn shadow(
    ctx: &Context,
    options: &RedriveOptions,
    to: &str,
) -> Result<ShadowReport, CliError> {
    let dlq_url = ctx.dlq()?.to_owned();
    let bucket = ctx.archive_bucket()?.to_owned();
    let main = (!ctx.main_queue_url.trim().is_empty()).then_some(ctx.main_queue_url.trim());
    // the staging queue exists (and says where it dead-letters), the DLQ answers
    let to_limits = resq::source::read_limits(&ctx.sqs, to)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading the staging queue {to}"),
            source,
        })?;
    let dlq_arn = resq::sqs::queue_arn(&ctx.sqs, &dlq_url)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading {dlq_url}"),
            source,
        })?;
    check_staging(
        to,
        main,
        &dlq_url,
        Some(&dlq_arn),
        to_limits.dead_letter_target.as_deref(),
    )?;
    let store = S3Store::new(ctx.s3.clone(), &bucket);
    let dlq = QueueUrl::from(dlq_url.as_str());
    let mut report = ShadowReport {
        to: to.to_owned(),
        ..Default::default()
    };
    // a replay selected by reason brings back the kept ones of that reason: so does its shadow
    let mut unhidden: HashMap<String, KeptMessage> = HashMap::new();
    if let Some(reason) = options.failure_reason.as_deref() {
        let hidden = resq::keep::still_hidden(&store, &dlq_url, chrono::Utc::now())
            .await
            .map_err(|source| CliError::Aws {
                what: format!("reading the keep lists in s3://{bucket}/kept/"),
                source,
            })?;
        let of_reason: Vec<KeptMessage> = hidden
            .into_iter()
            .filter(|k| k.failure_reason.as_deref() == Some(reason))
            .collect();
        let plan = Plan::release(&dlq, of_reason.iter().map(|k| k.receipt_handle.clone()));
        let done = settle(ctx, &store, &plan).await;
        for ((_, c), k) in done.iter().zip(of_reason) {
            if c.is_confirmed() {
                unhidden.insert(k.message_id.clone(), k);
            }
        }
        report.unhidden = unhidden.len() as u64;
    }
    let rules = Rules {
        max_redrive_attempts: options.max_redrive_attempts,
        archive_after: options.archive_after,
        permanent_action: options.permanent_action,
        reason: options.failure_reason.clone(),
        older_than: options.older_than,
        paused: false,
    };
    let to_fifo = resq::fifo::is_fifo(to);
    let visibility = hide_for(options.max_messages, options.rate_per_second);
    let pace = ReplayPace::new(options.rate_per_second, to);
    let settler = Settler::new(&ctx.sqs, &store, "resq");
    let to_url = QueueUrl::from(to);
    let mut seen: HashSet<String> = HashSet::new();
    // (message id, receipt handle, when received) of everything received
    let mut held: Vec<(String, String, Instant)> = Vec::new();
    let budget = u64::from(options.max_messages);
    let mut planned = 0u64;
    let outcome = loop {
        if planned >= budget {
            report.budget_reached = true;
            break Ok(());
        }
        let want = (budget - planned).min(resq::sqs::MAX_BATCH as u64) as i32;
        let batch = match ctx.sqs.receive(&dlq_url, want, Some(visibility), 1).await {
            Ok(batch) => batch,
            Err(source) => {
                break Err(CliError::Aws {
                    what: format!("receiving from {dlq_url}"),
                    source,
                });
            }
        };
        let received_at = Instant::now();
        let mut plan = Plan::new();
        let mut copies = Vec::new();
        let mut new = 0;
        for m in batch {
            held.push((m.message_id.clone(), m.receipt_handle.clone(), received_at));
            if !seen.insert(m.message_id.clone()) {
                continue;
            }
            new += 1;
            report.received += 1;
            match decide(&m, &rules, now_ms(), to_fifo) {
                Shadow::Copy(message) if planned < budget => {
                    planned += 1;
                    let action = Action::Copy {
                        to: to_url.clone(),
                        message,
                    };
                    let id = match m.group_id() {
                        Some(group) => plan.push_to(group, action),
                        None => plan.push(action),
                    };
                    copies.push((id, m));
                }
                Shadow::Copy(_) => *report.skipped.entry("overBudget".into()).or_default() += 1,
                Shadow::Skip(why) => *report.skipped.entry(why).or_default() += 1,
            }
        }
        if new == 0 {
            break Ok(());
        }
        if plan.is_empty() {
            continue;
        }
        let by = Instant::now() + Duration::from_secs(60);
        let done = settler
            .settle(
                &plan,
                Deadlines {
                    start_by: by,
                    move_by: by,
                    settle_by: by,
                },
                &pace,
            )
            .await;
        for (id, m) in copies {
            match done.get(id) {
                Confirmation::Confirmed(message_id) => {
                    report.copied += 1;
                    report.copies.push(Copied {
                        dlq_message_id: m.message_id.clone(),
                        message_id: message_id.clone(),
                        order_id: resq::correlation::order_id(&m.body),
                    });
                }
                other => report.failed.push(NotCopied {
                    dlq_message_id: m.message_id.clone(),
                    error: match other {
                        Confirmation::Failed(e) => e.to_string(),
                        _ => {
                            "not attempted (behind a failed copy of its FIFO group, or out of time)"
                                .to_owned()
                        }
                    },
                }),
            }
        }
    };
    leave_as_found(ctx, &store, &dlq, held, &unhidden, &mut report).await;
    outcome?;
    Ok(report)
}

/// Releases what the shadow received, except the kept messages it made visible: those are
/// hidden again until the moment they were hidden until, and listed again (with their new
/// receipt handle) so that they stay reachable.
async fn leave_as_found(
    ctx: &Context,
    store: &S3Store,
    dlq: &QueueUrl,
    held: Vec<(String, String, Instant)>,
    unhidden: &HashMap<String, KeptMessage>,
    report: &mut ShadowReport,
) {
    let mut release = Vec::new();
    let mut pending = Vec::new();
    for (message_id, receipt_handle, received_at) in held {
        match unhidden.get(&message_id) {
            Some(k) if k.hidden_until > now_ms() => pending.push(PendingKeep {
                kept: KeptMessage {
                    receipt_handle,
                    ..k.clone()
                },
                until_ms: k.hidden_until,
                received_at,
            }),
            _ => release.push(receipt_handle),
        }
    }
    if !pending.is_empty() {
        let (plan, entries) = resq_redriver::plan::keep(pending, dlq, now_ms(), Instant::now());
        let done = settle(ctx, store, &plan).await;
        for (_, listed, hidden) in entries {
            if done.is_confirmed(listed) && done.is_confirmed(hidden) {
                report.hidden_again += 1;
            } else {
                report.not_released += 1;
            }
        }
    }
    let count = release.len() as u64;
    let done = settle(ctx, store, &Plan::release(dlq, release)).await;
    let failed = done.iter().filter(|(_, c)| !c.is_confirmed()).count() as u64;
    report.released = count - failed;
    report.not_released += failed;
}

async fn settle(ctx: &Context, store: &S3Store, plan: &Plan) -> resq::settle::Report {
    let settler = Settler::new(&ctx.sqs, store, "resq");
    let by = Deadlines::all_by(Instant::now() + Duration::from_secs(60));
    settler.settle(plan, by, &Unpaced).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::attributes::{AttributeValue, MessageAttributes};
    use resq::config::PermanentAction;
    use std::collections::BTreeMap;

    const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/1/orders-dlq";
    const MAIN: &str = "https://sqs.us-east-1.amazonaws.com/1/orders";
    const STAGING: &str = "https://sqs.us-east-1.amazonaws.com/1/orders-staging";

    fn rules(reason: Option<&str>) -> Rules {
        Rules {
            max_redrive_attempts: 3,
            archive_after: Duration::from_secs(86_400),
            permanent_action: PermanentAction::Keep,
            reason: reason.map(str::to_owned),
            older_than: None,
            paused: false,
        }
    }

    fn dead_letter(attrs: &[(&str, AttributeValue)], sent_ms: u64) -> ReceivedMessage {
        ReceivedMessage {
            message_id: "d-1".into(),
            receipt_handle: "rh".into(),
            body: r#"{"orderId":"ORD-1"}"#.into(),
            attributes: BTreeMap::from([("SentTimestamp".into(), sent_ms.to_string())]),
            message_attributes: attrs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<MessageAttributes>(),
            dropped_attributes: vec![],
        }
    }

    #[test]
    fn the_shadow_is_the_copy_a_replay_would_send() {
        // GIVEN a transient dead letter replayed once already, with a trace attribute
        let now = 10_000_000;
        let m = dead_letter(
            &[
                ("x-failure-class", AttributeValue::string("transient")),
                ("x-failure-reason", AttributeValue::string("DOWNSTREAM")),
                ("x-redrive-count", AttributeValue::number(1)),
                ("trace-id", AttributeValue::string("t-1")),
            ],
            now - 1000,
        );
        // WHEN its shadow is decided
        let Shadow::Copy(copy) = decide(&m, &rules(None), now, false) else {
            panic!("not copied")
        };
        // THEN it is exactly the redriver's replay
        assert_eq!(copy, classify::replay(&m, false).unwrap());
        assert_eq!(
            copy.attributes["x-redrive-count"].string_value.as_deref(),
            Some("2")
        );
        assert!(!copy.attributes.contains_key("x-failure-reason"));
        assert_eq!(
            copy.attributes["trace-id"].string_value.as_deref(),
            Some("t-1")
        );
        // AND into a FIFO staging queue it carries a group and a deduplication id
        let Shadow::Copy(fifo) = decide(&m, &rules(None), now, true) else {
            panic!("not copied")
        };
        assert!(fifo.group_id.is_some() && fifo.deduplication_id.is_some());
    }

    #[test]
    fn what_a_replay_would_not_send_is_not_copied_and_says_why() {
        let now = 100 * 86_400_000;
        let permanent = [
            ("x-failure-class", AttributeValue::string("permanent")),
            (
                "x-failure-reason",
                AttributeValue::string("VALIDATION_FAILED"),
            ),
        ];
        let kept = dead_letter(&permanent, now - 1000);
        assert_eq!(
            decide(&kept, &rules(None), now, false),
            Shadow::Skip("kept".into())
        );
        // picked by its reason (after a fix), a permanent failure is replayed: so is its shadow
        assert!(matches!(
            decide(&kept, &rules(Some("VALIDATION_FAILED")), now, false),
            Shadow::Copy(_)
        ));
        assert_eq!(
            decide(&kept, &rules(Some("MALFORMED_JSON")), now, false),
            Shadow::Skip("notSelected".into())
        );
        let old = dead_letter(&[], now - 2 * 86_400_000);
        assert_eq!(
            decide(&old, &rules(None), now, false),
            Shadow::Skip("TTL_EXPIRED".into())
        );
        let capped = dead_letter(&[("x-redrive-count", AttributeValue::number(3))], now);
        assert_eq!(
            decide(&capped, &rules(None), now, false),
            Shadow::Skip("REDRIVE_CAP".into())
        );
    }

    #[test]
    fn a_staging_queue_must_not_be_production() {
        let dlq_arn = "arn:aws:sqs:us-east-1:1:orders-dlq";
        assert!(check_staging(STAGING, Some(MAIN), DLQ, Some(dlq_arn), None).is_ok());
        let main = check_staging(MAIN, Some(MAIN), DLQ, Some(dlq_arn), None).unwrap_err();
        assert_eq!(main.exit_code(), 2);
        assert!(main.to_string().contains("is the main queue"), "{main}");
        assert!(
            check_staging(&format!("{DLQ}/"), None, DLQ, None, None)
                .unwrap_err()
                .to_string()
                .contains("is the DLQ itself")
        );
        // a queue dead-lettering into this DLQ is a source, known even without --main-queue-url
        let source = check_staging(STAGING, None, DLQ, Some(dlq_arn), Some(dlq_arn)).unwrap_err();
        assert!(
            source.to_string().contains("production source queue"),
            "{source}"
        );
    }

    #[test]
    fn the_shadow_hides_what_it_holds_for_its_run_and_a_minute() {
        assert_eq!(hide_for(1000, 10.0), 160);
        assert_eq!(hide_for(1, 1000.0), 61);
        assert_eq!(hide_for(u32::MAX, 0.001), 43_200);
    }
}
