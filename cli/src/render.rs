//! What `resq` prints: pure functions from a command's result to the text on stdout (plain,
//! or `--json`) and the notes on stderr. Every string ends with a newline unless empty.

use resq::archive::ArchiveEnvelope;
use resq_redriver::Summary;
use serde_json::json;

use crate::CliError;
use crate::archive::{Audit, PatchedRestore};
use crate::canary::CanaryReport;
use crate::consumer::{ConsumerStatus, PauseReport, ResumeReport, Standing};
use crate::dlq::{self, PeekReport, Tally};
use crate::find::{self, Finding};
use crate::locate::{Coverage, Place, Queued};
use crate::shadow::ShadowReport;
use crate::stack::{Report, Source, Verdict};
use crate::status::{SendReport, Status};

/// `resq send`: how many of `total` orders reached `queue_url`, and those that did not.
pub fn send(report: &SendReport, total: usize, queue_url: &str, as_json: bool) -> String {
    if as_json {
        return line(json!({"sent": report.sent, "failed": report.failed}));
    }
    let mut out = format!("sent {} of {total} orders to {queue_url}\n", report.sent);
    for (id, why) in &report.failed {
        out.push_str(&format!("  not sent: {id}: {why}\n"));
    }
    out
}

/// `resq status`: a table of the queues, the consumer's line, then a table of the alarms;
/// times said against `now_ms`.
pub fn status(s: &Status, now_ms: u64, as_json: bool) -> String {
    if as_json {
        let queues: Vec<_> = s
            .queues
            .iter()
            .map(|q| {
                json!({
                    "queue": q.label,
                    "url": q.url,
                    "waiting": q.visible,
                    "inFlight": q.in_flight,
                    "oldestAgeSeconds": q.oldest_age_seconds,
                })
            })
            .collect();
        let alarms: Vec<_> = s
            .alarms
            .iter()
            .map(|(name, state)| json!({"name": name, "state": state}))
            .collect();
        return line(
            json!({"queues": queues, "consumer": consumer_json(&s.consumer), "alarms": alarms}),
        );
    }
    let mut out = format!(
        "{:<8} {:>9} {:>10} {:>12}  url\n",
        "queue", "waiting", "in flight", "oldest (s)"
    );
    for q in &s.queues {
        let age = q
            .oldest_age_seconds
            .map_or("-".to_owned(), |a| format!("{a:.0}"));
        out.push_str(&format!(
            "{:<8} {:>9} {:>10} {:>12}  {}\n",
            q.label, q.visible, q.in_flight, age, q.url
        ));
    }
    out.push_str(&format!("\n{}\n", consumer_line(&s.consumer, now_ms)));
    if s.alarms.is_empty() {
        out.push_str("\nno alarms with that prefix\n");
    } else {
        out.push_str(&format!("\n{:<48} state\n", "alarm"));
        for (name, state) in &s.alarms {
            out.push_str(&format!("{name:<48} {state}\n"));
        }
    }
    out
}

/// The consumer's part of `resq status --json`.
fn consumer_json(c: &ConsumerStatus) -> serde_json::Value {
    match c {
        ConsumerStatus::NotConfigured => json!({"configured": false}),
        ConsumerStatus::Known {
            mapping,
            state,
            standing,
            record,
        } => json!({
            "configured": true,
            "mapping": mapping,
            "state": state.as_str(),
            "standing": standing,
            "record": record,
        }),
        ConsumerStatus::NoSuchMapping { mapping } => json!({
            "configured": true,
            "mapping": mapping,
            "error": "no such event source mapping",
        }),
        ConsumerStatus::Unreadable {
            mapping,
            what,
            source,
        } => json!({
            "configured": true,
            "mapping": mapping,
            "error": format!("{what}: {source}"),
        }),
    }
}

/// `resq status`'s lines on the consumer: running, paused by resq (since when, which alarm,
/// its probes), paused by hand (since when, by whom, why), or why it cannot be told; then its
/// event source mapping and state.
pub fn consumer_line(c: &ConsumerStatus, now_ms: u64) -> String {
    let (mapping, state, standing, record) = match c {
        ConsumerStatus::NotConfigured => {
            return "consumer breaker: not configured (no event source mapping named: --mapping, CONSUMER_EVENT_SOURCE_MAPPING or the stack output ConsumerEventSourceMapping)".to_owned();
        }
        ConsumerStatus::NoSuchMapping { mapping } => {
            return format!("consumer: unknown: no event source mapping {mapping} (below)");
        }
        ConsumerStatus::Unreadable { mapping, .. } => {
            return format!(
                "consumer: unknown: the event source mapping {mapping} or its pause record could not be read (below)"
            );
        }
        ConsumerStatus::Known {
            mapping,
            state,
            standing,
            record,
        } => (mapping, state, *standing, record.as_ref()),
    };
    let since = |r: &resq::state::PauseRecord| {
        r.since
            .map_or_else(String::new, |t| format!(" since {}", when(t, now_ms)))
    };
    let what = match (standing, record) {
        (Standing::Running, _) => "running".to_owned(),
        (Standing::Settling, _) => format!(
            "{} (Lambda is switching nothing until it settles)",
            state.as_str()
        ),
        (Standing::DisabledOutsideResq, _) => {
            "paused by hand (no record: disabled outside resq)".to_owned()
        }
        (Standing::PausedByResq | Standing::Probing, Some(r)) => {
            let probing = match standing {
                Standing::Probing => "; probing now",
                _ => "",
            };
            format!(
                "paused by resq{}{}{}{probing}",
                since(r),
                alarms_of(r),
                probes_of(r, now_ms)
            )
        }
        (Standing::PausedByHand, Some(r)) => format!(
            "paused by hand{}{}{}",
            since(r),
            r.who
                .as_deref()
                .map_or_else(String::new, |w| format!(" by {w}")),
            r.reason
                .as_deref()
                .map_or_else(String::new, |w| format!(", reason: {w}")),
        ),
        (Standing::RunningDespiteRecord, Some(r)) => format!(
            "running, although its latest record says paused by {}{}: enabled outside resq",
            by_whom(r.by),
            since(r)
        ),
        // a standing read with a record is never without it
        (_, None) => state.as_str().to_owned(),
    };
    let note = match standing {
        Standing::PausedByHand | Standing::DisabledOutsideResq => {
            "; resq's breaker never resumes it (`resq consumer resume` does)"
        }
        _ => "",
    };
    format!(
        "consumer: {what}\n  event source mapping {mapping}: {}{note}",
        state.as_str()
    )
}

fn by_whom(by: resq::state::PausedBy) -> &'static str {
    match by {
        resq::state::PausedBy::Resq => "resq",
        resq::state::PausedBy::Operator => "hand",
    }
}

/// `, alarm A` / `, alarms A, B` (none: nothing).
fn alarms_of(r: &resq::state::PauseRecord) -> String {
    match r.alarms.as_slice() {
        [] => String::new(),
        [one] => format!(", alarm {one}"),
        many => format!(", alarms {}", many.join(", ")),
    }
}

/// `; N probes so far, the last at T` (none yet: said so).
fn probes_of(r: &resq::state::PauseRecord, now_ms: u64) -> String {
    let last = r.last_probe_at.map_or_else(String::new, |t| {
        format!(", the last at {}", when(t, now_ms))
    });
    match r.probes {
        0 if last.is_empty() => "; no probe yet".to_owned(),
        1 => format!("; 1 probe so far{last}"),
        n => format!("; {n} probes so far{last}"),
    }
}

/// An epoch-millis time and how long before `now_ms`: `2026-11-26T10:00:00Z (12m ago)`.
fn when(ms: u64, now_ms: u64) -> String {
    format!(
        "{} ({} ago)",
        at(ms),
        span(now_ms.saturating_sub(ms) / 1000)
    )
}

/// A length of time in words: `45s`, `12m`, `3h 5m`, `2d 4h`.
fn span(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        s => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// What a pause or resume found before it, in a line (none: empty).
fn before(
    standing: Option<Standing>,
    previous: Option<&resq::state::PauseRecord>,
    now_ms: u64,
) -> Option<String> {
    let r = previous;
    let since = |r: &resq::state::PauseRecord| {
        r.since
            .map_or_else(String::new, |t| format!(" since {}", when(t, now_ms)))
    };
    match (standing?, r) {
        (Standing::PausedByResq | Standing::Probing, Some(r)) => {
            Some(format!("paused by resq{}{}", since(r), alarms_of(r)))
        }
        (Standing::PausedByHand, Some(r)) => Some(format!(
            "paused by hand{}{}",
            since(r),
            r.who
                .as_deref()
                .map_or_else(String::new, |w| format!(" by {w}"))
        )),
        (Standing::DisabledOutsideResq, _) => Some("disabled outside resq (no record)".to_owned()),
        _ => None,
    }
}

/// `resq consumer pause`: what was done, what it found, and that resq's breaker never undoes
/// it.
pub fn consumer_paused(p: &PauseReport, now_ms: u64, as_json: bool) -> String {
    if as_json {
        return line(json!({
            "mapping": p.mapping,
            "was": p.was.as_str(),
            "state": p.now.as_str(),
            "before": p.standing_before(),
            "previous": p.previous.as_ref().ok(),
            "previousUnreadable": p.previous.as_ref().err(),
            "record": p.record,
            "recordedIn": p.written_to,
        }));
    }
    let r = &p.record;
    let mut out = if p.was.is_on() == Some(false) {
        format!(
            "the consumer's event source mapping {} was already {}: left so, and the pause recorded as yours\n",
            p.mapping,
            p.was.as_str()
        )
    } else {
        format!(
            "paused the consumer: event source mapping {} is {} (was {})\n",
            p.mapping,
            p.now.as_str(),
            p.was.as_str()
        )
    };
    let previous = p.previous.as_ref().ok().and_then(Option::as_ref);
    match (
        p.standing_before(),
        before(p.standing_before(), previous, now_ms),
    ) {
        (Some(Standing::PausedByResq | Standing::Probing), Some(was)) => out.push_str(&format!(
            "it was {was}: the pause is yours now (resq's breaker no longer probes or resumes it)\n"
        )),
        (_, Some(was)) => out.push_str(&format!("it was {was}\n")),
        (_, None) => {}
    }
    if let Err(why) = &p.previous {
        out.push_str(&format!(
            "its previous pause record could not be read ({why}): this one supersedes it\n"
        ));
    }
    out.push_str(&format!(
        "recorded in {}: paused by {} at {}{}\n",
        p.written_to,
        r.who.as_deref().unwrap_or("?"),
        at(r.at),
        r.reason
            .as_deref()
            .map_or_else(String::new, |w| format!(", reason: {w}"))
    ));
    out.push_str(
        "resq's breaker never resumes a pause made by hand: `resq consumer resume` does\n",
    );
    out
}

/// `resq consumer resume`: what was done, what it ended, and what it was forced past.
pub fn consumer_resumed(r: &ResumeReport, now_ms: u64, as_json: bool) -> String {
    let previous = r.previous.as_ref().ok().and_then(Option::as_ref);
    let standing_before = r
        .previous
        .as_ref()
        .ok()
        .map(|p| crate::consumer::standing(&r.was, p.as_ref()));
    if as_json {
        let (record, recorded_in) = match &r.record {
            Some((record, key)) => (Some(record), Some(key)),
            None => (None, None),
        };
        return line(json!({
            "mapping": r.mapping,
            "was": r.was.as_str(),
            "state": r.now.as_str(),
            "resumed": r.record.is_some(),
            "before": standing_before,
            "previous": previous,
            "previousUnreadable": r.previous.as_ref().err(),
            "record": record,
            "recordedIn": recorded_in,
            "unchecked": r.unchecked,
            "alarmsUnread": r.alarms_unread,
        }));
    }
    let Some((record, written_to)) = &r.record else {
        return format!(
            "the consumer is running (event source mapping {}: {}) and no pause is on record: nothing to resume\n",
            r.mapping,
            r.now.as_str()
        );
    };
    let mut out = if r.was.is_on() == Some(true) {
        format!(
            "the consumer's event source mapping {} was already {}: its pause on record ended\n",
            r.mapping,
            r.was.as_str()
        )
    } else {
        format!(
            "resumed the consumer: event source mapping {} is {} (was {})\n",
            r.mapping,
            r.now.as_str(),
            r.was.as_str()
        )
    };
    if let Some(was) = before(standing_before, previous, now_ms) {
        out.push_str(&format!("it was {was}\n"));
    }
    if let Err(why) = &r.previous {
        out.push_str(&format!(
            "its previous pause record could not be read ({why}): this one supersedes it\n"
        ));
    }
    out.push_str(&format!(
        "recorded in {written_to}: resumed by {} at {}\n",
        record.who.as_deref().unwrap_or("?"),
        at(record.at)
    ));
    match (&r.alarms_unread, record.alarms.as_slice()) {
        (Some(why), _) => out.push_str(&format!(
            "forced without reading the breaker's alarms ({why}): the record says forced\n"
        )),
        (None, []) => {}
        (None, alarms) => out.push_str(&format!(
            "forced past the breaker's alarm{} in ALARM: {}; resq's breaker does not pause the consumer again until {} left ALARM once\n",
            if alarms.len() == 1 { "" } else { "s" },
            alarms.join(", "),
            if alarms.len() == 1 { "it has" } else { "they have" }
        )),
    }
    out
}

/// `resq consumer resume`'s notes on stderr: the breaker's alarms that do not exist (not
/// checked).
pub fn consumer_resumed_notes(r: &ResumeReport) -> String {
    r.unchecked
        .iter()
        .map(|a| format!("note: the consumer breaker's alarm {a} does not exist: not checked\n"))
        .collect()
}

/// How many reasons, and how many groups, `resq dlq peek` names at most; the others are summed
/// up in one line.
pub const COUNTS_NAMED: usize = 10;

/// `resq dlq peek`: the messages shown, each with its failure marks, age, group and body, then
/// what matches counted by reason and by group (the largest first). With `--json`, one object:
/// `messages`, and `counts` (every reason and group).
pub fn peek(report: &PeekReport, as_json: bool) -> String {
    let c = &report.counts;
    if as_json {
        let tallies = |name: &str, tallies: &[Tally]| -> Vec<serde_json::Value> {
            tallies
                .iter()
                .map(|t| {
                    let mut o = serde_json::Map::new();
                    o.insert(name.to_owned(), json!(t.key));
                    o.insert("messages".to_owned(), json!(t.messages));
                    serde_json::Value::Object(o)
                })
                .collect()
        };
        return line(json!({
            "messages": report.shown,
            "counts": {
                "read": c.read,
                "matching": c.matching,
                "more": c.more,
                "byReason": tallies("reason", &c.by_reason),
                "byGroup": tallies("group", &c.by_group),
            },
        }));
    }
    if report.shown.is_empty() && c.matching == 0 {
        return "no DLQ messages match\n".to_owned();
    }
    let mut out: String = report
        .shown
        .iter()
        .map(|p| {
            format!(
                "{}  reason={} class={} redrives={} age={}s{}\n  {}\n",
                p.message_id,
                p.reason.as_deref().unwrap_or("-"),
                p.failure_class.as_deref().unwrap_or("-"),
                p.redrive_count.as_deref().unwrap_or("0"),
                p.age_seconds.map_or("?".into(), |a| a.to_string()),
                p.group
                    .as_deref()
                    .map_or_else(String::new, |g| format!(" group={g}")),
                p.body
            )
        })
        .collect();
    out.push_str(&format!(
        "{} matching of the {} DLQ messages read{}, by reason:\n",
        c.matching,
        c.read,
        if c.more { " (the DLQ holds more)" } else { "" }
    ));
    out.push_str(&tallies(&c.by_reason, dlq::NO_REASON, "reasons"));
    out.push_str("by group:\n");
    out.push_str(&tallies(&c.by_group, dlq::NO_GROUP, "groups"));
    out
}

/// Counts, a line each, the largest [`COUNTS_NAMED`] named (`none` for the messages without a
/// key), the others summed up in a last line.
fn tallies(tallies: &[Tally], none: &str, plural: &str) -> String {
    let named = tallies.len().min(COUNTS_NAMED);
    let mut out: String = tallies[..named]
        .iter()
        .map(|t| {
            format!(
                "  {:>7}  {}\n",
                t.messages,
                t.key.as_deref().unwrap_or(none)
            )
        })
        .collect();
    let others = &tallies[named..];
    if !others.is_empty() {
        out.push_str(&format!(
            "  {:>7}  in {} more {plural}\n",
            others.iter().map(|t| t.messages).sum::<usize>(),
            others.len()
        ));
    }
    out
}

/// `resq dlq peek`'s notes on stderr: the kept messages made visible, or how many stay
/// hidden.
pub fn peek_notes(report: &PeekReport) -> String {
    let mut out = String::new();
    if let Some(n) = report.unhidden {
        out.push_str(&format!(
            "{n} kept messages made visible (the next scheduled run keeps and hides them again)\n"
        ));
    }
    if report.hidden > 0 {
        out.push_str(&format!(
            "{} more DLQ messages are hidden: permanent failures the redriver keeps until their TTL (--kept shows them), or messages a run holds\n",
            report.hidden
        ));
    }
    if report.counts.more {
        out.push_str(&format!(
            "the counts are of the first {} DLQ messages read, of about {} visible when the peek began (a peek reads {} to count, or as many as it needs to show --limit, each hidden until it ends)\n",
            report.counts.read,
            report.waiting,
            dlq::COUNTS_READ
        ));
    }
    out
}

/// `resq dlq redrive`: the run's summary, as the redriver function returns it (JSON either
/// way).
pub fn redrive(summary: &Summary) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(summary).unwrap_or_default()
    )
}

/// `resq dlq redrive`'s notes on stderr: a dry run's (none with `--json`), and, whatever the
/// output, the DLQ messages an ended run could not release (an interrupted run's error says
/// what it released).
pub fn redrive_notes(done: &crate::dlq::Redriven, as_json: bool) -> String {
    let mut out = String::new();
    if done.summary.dry_run && !as_json {
        out.push_str("dry run: nothing was changed; run again without --dry-run to redrive\n");
    }
    let interrupted = done.summary.stopped_by == resq_redriver::StopReason::Interrupted;
    let held = &done.held;
    let not_released = crate::not_released(
        held.left,
        held.receives_cut_off,
        held.back_within.map_or(0, |d| d.as_secs()),
    );
    if !not_released.is_empty() && !interrupted {
        out.push_str(&format!(
            "warning: of the DLQ messages this run held, {not_released}\n"
        ));
    }
    out
}

/// The note when the stack's `KEPT_IN_FLIGHT_MAX` is not known.
pub fn kept_limit_unknown() -> String {
    format!(
        "KEPT_IN_FLIGHT_MAX not known (no --stack with a KeptInFlightMax parameter, no --kept-in-flight-max): the run hides at most the default {} kept messages",
        resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX
    )
}

/// `resq dlq redrive --to … --keep-source`: what the shadow replay did (JSON either way, like
/// a redrive's summary).
pub fn shadow(report: &ShadowReport) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(report).unwrap_or_default()
    )
}

/// The shadow replay's note on stderr (none with `--json`): where the copies went, and that
/// the DLQ is as it was.
pub fn shadow_notes(report: &ShadowReport, as_json: bool) -> String {
    if as_json {
        return String::new();
    }
    let left = report.kept_left_visible.len();
    let mut out = format!(
        "shadow replay: {} copies sent to {}; the DLQ is {}: nothing deleted, {} messages released",
        report.copied,
        report.to,
        if left == 0 {
            "unchanged"
        } else {
            "as it was but for the kept messages below"
        },
        report.released
    );
    let hidden_again = report.hidden_again + report.hidden_again_by_keep_list;
    if hidden_again > 0 {
        out.push_str(&format!(
            ", {hidden_again} kept messages hidden again until the moment they were hidden until"
        ));
    }
    out.push('\n');
    if report.unhidden < report.kept_listed {
        out.push_str(&format!(
            "{} of the {} kept messages of the reason were made visible for the copy (what the copy budget can take); the others stayed hidden\n",
            report.unhidden, report.kept_listed
        ));
    }
    if report.budget_reached {
        out.push_str(
            "the copy budget (--max-messages) was reached: more messages may be waiting\n",
        );
    }
    if let Some(e) = &report.receive_error {
        out.push_str(&format!(
            "error: receiving stopped part-way: {e}; what was received was left as found (above)\n"
        ));
    }
    if report.not_copied_limit_reached {
        out.push_str(&format!(
            "receiving stopped after {} messages it does not copy (each hidden for the run): selected messages beyond them were not reached; narrow the selection (--older-than-seconds) or run it again later\n",
            crate::shadow::NOT_COPIED_MAX
        ));
    }
    if left > 0 {
        out.push_str(&format!(
            "warning: {left} kept messages made visible for the copy could not be hidden again (someone else received them, or SQS refused the keep list's handle): they stay visible in the DLQ until the next scheduled redriver run keeps and hides them again: {}\n",
            report.kept_left_visible.join(", ")
        ));
    }
    if report.not_released > 0 {
        out.push_str(&format!(
            "warning: {} messages could not be released (or hidden again); they come back by themselves after their visibility timeout\n",
            report.not_released
        ));
    }
    for f in &report.failed {
        out.push_str(&format!(
            "  not copied: {}: {}\n",
            f.dlq_message_id, f.error
        ));
    }
    out
}

/// `resq dlq redrive --canary`: the canaries, their outcomes, the decision and the runs (JSON
/// either way).
pub fn canary(report: &CanaryReport) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(report).unwrap_or_default()
    )
}

/// `resq archive restore --patch`: the restore, the body sent, the record written.
pub fn patched(done: &PatchedRestore, as_json: bool) -> String {
    let audit = match &done.audit {
        Audit::NotWritten => "notWritten",
        Audit::Complete => "complete",
        Audit::Incomplete(_) => "incomplete",
    };
    if as_json {
        return line(json!({
            "key": done.key,
            "restored": done.message_id.is_some(),
            "dryRun": done.message_id.is_none(),
            "messageId": done.message_id,
            "body": done.body,
            "record": done.record,
            "audit": audit,
        }));
    }
    match &done.message_id {
        Some(id) => format!(
            "restored {} as message {id}, its body patched:\n  {}\nrecorded in the entry: restored by {} at {}\n",
            done.key, done.body, done.record.by, done.record.at
        ),
        None => format!(
            "would restore {} with its body patched:\n  {}\nand record in the entry: restored by {}\n",
            done.key, done.body, done.record.by
        ),
    }
}

/// A patched restore's warning on stderr when its record could not be completed (also with
/// `--json`: it asks for an action).
pub fn patched_notes(done: &PatchedRestore, _as_json: bool) -> String {
    match (&done.audit, &done.message_id) {
        (Audit::Incomplete(why), Some(id)) => format!(
            "warning: {} was restored as message {id}, and its entry records who restored it, when and the patch (written before the send), but not the new message id: {why}. Do not restore it again (the order would run twice); `resq archive show {}` shows the record\n",
            done.key, done.key
        ),
        _ => String::new(),
    }
}

/// `resq archive ls`: one key a line, or a JSON array.
pub fn archive_keys(keys: &[String], as_json: bool) -> String {
    if as_json {
        return line(json!(keys));
    }
    keys.iter().map(|k| format!("{k}\n")).collect()
}

/// `resq archive ls`'s note on stderr: how many entries (none with `--json`).
pub fn archive_keys_notes(keys: &[String], as_json: bool) -> String {
    if as_json {
        String::new()
    } else {
        format!("{} entries\n", keys.len())
    }
}

/// `resq archive show`: the entry as stored (JSON either way).
pub fn archive_entry(envelope: &ArchiveEnvelope) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(envelope).unwrap_or_default()
    )
}

/// `resq archive restore`: one line for one key, the new message's id (`None`: a dry run).
/// With `--json`, one JSON object a line.
pub fn restored(key: &str, message_id: Option<&str>, as_json: bool) -> String {
    match (message_id, as_json) {
        (Some(id), false) => format!("restored {key} as message {id}\n"),
        (None, false) => format!("would restore {key}\n"),
        (Some(id), true) => line(json!({"key": key, "restored": true, "messageId": id})),
        (None, true) => line(json!({"key": key, "restored": false, "dryRun": true})),
    }
}

/// An epoch-millis time as RFC 3339 (UTC, seconds).
fn at(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || ms.to_string(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
}

/// What a place line adds for a message matched by its text, not by its id.
fn by_text(matched: bool) -> &'static str {
    if matched {
        " (matched by text: its order id could not be read, and its body holds this id as a string)"
    } else {
        ""
    }
}

/// A copy in a queue (`label`), in a line: its id, what `marks` say of it, its redrives and
/// its age at `now_ms`.
fn queued(label: &str, q: &Queued, marks: String, now_ms: u64) -> String {
    let age = q.first_sent_at.map_or_else(String::new, |t| {
        format!(" age={}s", now_ms.saturating_sub(t) / 1000)
    });
    let group = q
        .group
        .as_deref()
        .map_or_else(String::new, |g| format!(" group={g}"));
    format!(
        "{label:<11} message {} {marks} redrives={}{age}{group}{}",
        q.message_id,
        q.redrive_count.as_deref().unwrap_or("0"),
        by_text(q.matched_by_text)
    )
}

/// One place an order was seen, in a line (without the order).
pub fn place(p: &Place, now_ms: u64) -> String {
    match p {
        Place::Recorded(r) => {
            let times = match r.writes {
                1 => "written once".to_owned(),
                n => format!("written {n} times: the order's effect was written more than once"),
            };
            let last = r
                .written_at
                .last()
                .map_or_else(String::new, |t| format!(", last at {}", at(*t)));
            let gone = if r.current {
                ""
            } else {
                " (expired since: only earlier versions remain)"
            };
            format!("{:<11} {} {times}{last}{gone}", "recorded", r.key)
        }
        Place::MainQueue(q) => {
            let receives = q.receive_count.map_or("?".into(), |n| n.to_string());
            queued("main queue", q, format!("receives={receives}"), now_ms)
        }
        Place::Dlq(q) => {
            let class = q.failure_class.as_deref().unwrap_or("-");
            let reason = q.failure_reason.as_deref().unwrap_or("-");
            queued("DLQ", q, format!("class={class} reason={reason}"), now_ms)
        }
        Place::Kept(k) => format!(
            "{:<11} message {} reason={}: a permanent failure kept in the DLQ for a human, hidden by the redriver until {} (`resq dlq peek --kept` shows it)",
            "kept",
            k.message_id,
            k.failure_reason.as_deref().unwrap_or("-"),
            at(k.hidden_until)
        ),
        Place::Archived(a) => {
            let error = a
                .last_error
                .as_deref()
                .map_or_else(String::new, |e| format!(", last error: {e}"));
            let restores = match a.restores {
                0 => String::new(),
                n => format!(", restored {n} time(s) since"),
            };
            format!(
                "{:<11} {} reason={} by {} at {} redrives={}{error}{restores}{}",
                "archived",
                a.key,
                a.reason,
                a.archived_by,
                a.archived_at,
                a.redrive_count.map_or("?".into(), |n| n.to_string()),
                by_text(a.matched_by_text),
            )
        }
    }
}

/// `resq find`: every place the order was seen (stdout), or that it was seen nowhere. With
/// `--json`, one object: the order, the verdict, the places, what the look covered and what it
/// could not see.
pub fn find(f: &Finding, now_ms: u64, as_json: bool) -> String {
    if as_json {
        let verdict = match f.verdict() {
            find::Verdict::Found => "found",
            find::Verdict::Nowhere => "nowhere",
            find::Verdict::NotSeen => "notSeen",
        };
        return line(json!({
            "orderId": f.order_id,
            "verdict": verdict,
            "places": f.places,
            "coverage": f.look.coverage,
            "unseen": f.look.unseen(),
        }));
    }
    if f.places.is_empty() {
        return format!("{}: seen nowhere\n", f.order_id);
    }
    let mut out = format!(
        "{}: seen in {} place{}\n",
        f.order_id,
        f.places.len(),
        if f.places.len() == 1 { "" } else { "s" }
    );
    for p in &f.places {
        out.push_str(&format!("  {}\n", place(p, now_ms)));
    }
    out
}

/// `resq find`'s notes on stderr (none with `--json`): what the look covered and what it cost
/// (each main-queue message received raised its receive count and was hidden for a moment),
/// and what it could not see.
pub fn find_notes(f: &Finding, as_json: bool) -> String {
    if as_json {
        return String::new();
    }
    let c = &f.look.coverage;
    let main = &c.main_queue;
    let mut out = looked_at(c);
    if let Some(group) = &c.group {
        out.push_str(&format!(
            "narrowed to group {group} (--group): in the main queue and the DLQ, only messages of MessageGroupId {group} were looked at; order records, kept messages and archive entries are shown whatever their group\n"
        ));
    }
    if main.last_receive_used > 0 {
        out.push_str(&format!(
            "warning: this look used the last allowed receive of {} main-queue message(s): SQS moves them to the DLQ, without a reason, on their next receive (the redriver replays them)\n",
            main.last_receive_used
        ));
    }
    for q in [("main queue", main), ("DLQ", &c.dlq)] {
        if q.1.not_released > 0 {
            out.push_str(&format!(
                "warning: {} {} messages could not be released; they come back by themselves within {} s\n",
                q.1.not_released, q.0, q.1.hidden_for_seconds
            ));
        }
    }
    let by_text = main.matched_by_text + c.dlq.matched_by_text + c.archive_matched_by_text;
    if by_text > 0 {
        out.push_str(&format!(
            "note: {by_text} of the places were matched by text: their order id (`{}`) could not be read (a body that is not JSON, or without the field), and their body holds this id as a string value\n",
            c.id_field
        ));
    }
    for u in f.look.unseen() {
        out.push_str(&format!("not seen: {u}\n"));
    }
    out
}

/// `resq find`'s line of what the look covered, and what it cost.
fn looked_at(c: &Coverage) -> String {
    let mut out = format!(
        "looked at: the order records; {} archive entries",
        c.archive_read
    );
    let main = &c.main_queue;
    if main.counted {
        out.push_str(&format!(
            "; the main queue: not looked into (about {} visible, {} in flight, by its counts; nothing received: `--main-queue` receives up to {} of its messages, each receive raising its ApproximateReceiveCount toward maxReceiveCount)",
            main.visible_before,
            main.in_flight,
            find::DEFAULT_MAIN_QUEUE_LIMIT
        ));
    }
    if main.looked {
        if main.received == 0 {
            out.push_str("; the main queue: nothing received (nothing waiting)");
        } else {
            out.push_str(&format!(
                "; the main queue: {} messages received, once each (ApproximateReceiveCount +1{}; hidden from the consumer for at most {} s, released at once)",
                main.received,
                main.max_receive_count
                    .map_or_else(String::new, |m| format!(" toward maxReceiveCount {m}")),
                main.hidden_for_seconds
            ));
        }
    }
    if c.dlq.looked {
        if c.dlq.received == 0 {
            out.push_str("; the DLQ: nothing received (nothing visible)");
        } else {
            out.push_str(&format!(
                "; the DLQ: {} messages received (hidden for at most {} s, released at once)",
                c.dlq.received, c.dlq.hidden_for_seconds
            ));
        }
    }
    if c.kept_read {
        out.push_str(&format!(
            "; the keep lists: {} kept messages listed (those of this order checked, their hide left as it was",
            c.kept_listed
        ));
        if c.kept_not_hidden > 0 {
            out.push_str(&format!(
                "; {} of them no longer hidden: made visible, replayed or archived since",
                c.kept_not_hidden
            ));
        }
        out.push(')');
    }
    out.push('\n');
    out
}

/// `resq stack check`: the template and the values given, then one line per rule (`ok`,
/// `conflict` naming the parameters, the figures and what could happen, or `warning`), or, when
/// CloudFormation itself would refuse a value, one line per such value instead.
pub fn stack_check(report: &Report, template: &std::path::Path) -> String {
    let mut out = format!("resq stack check: {}\n", template.display());
    let mut given: Vec<String> = Vec::new();
    for source in [Source::Samconfig, Source::CommandLine] {
        let values: Vec<String> = report
            .set
            .given()
            .filter(|(_, _, s)| *s == source)
            .map(|(name, value, _)| format!("{name}={value}"))
            .collect();
        if !values.is_empty() {
            given.push(format!("{} ({source})", values.join(" ")));
        }
    }
    if given.is_empty() {
        out.push_str("  values: the template's defaults\n");
    } else {
        out.push_str(&format!(
            "  values: {}; the rest at the template's defaults\n",
            given.join("; ")
        ));
    }
    for r in &report.refusals {
        let value = r
            .value
            .as_deref()
            .map_or_else(String::new, |v| format!("={v}"));
        out.push_str(&format!(
            "refused   {}{value} ({}): CloudFormation refuses it: {}\n",
            r.parameter, r.source, r.why
        ));
    }
    if !report.refusals.is_empty() {
        out.push_str(
            "  the rules were not evaluated: CloudFormation would refuse this set first\n",
        );
    }
    for v in &report.verdicts {
        out.push_str(&verdict(v));
    }
    out
}

/// One rule's verdict, a line (`resq stack check` and `resq check --function`).
fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Holds { rule, figures } => format!("ok        {}: {figures}\n", rule.name()),
        Verdict::Warning { rule, figures } => format!("warning   {}: {figures}\n", rule.name()),
        Verdict::Conflict(c) => format!(
            "conflict  {} (could {}): {}: {}: {}\n",
            c.rule.name(),
            c.risk.word(),
            c.parameters.join(", "),
            c.figures,
            c.consequence
        ),
    }
}

/// `resq check --function`: the function, then each event source mapping with its verdicts.
pub fn function_check(check: &crate::check::FunctionCheck) -> String {
    let mut out = format!(
        "resq check --function {}: timeout {} s, {} event source mapping{}\n",
        check.function,
        crate::stack::figure(check.timeout),
        check.sources.len(),
        if check.sources.len() == 1 { "" } else { "s" }
    );
    for source in &check.sources {
        out.push_str(&format!(
            "mapping {} ({}) reads {}\n",
            source.mapping, source.state, source.source_arn
        ));
        if source.verdicts.is_empty() {
            out.push_str("  not an SQS queue: not checked\n");
        }
        for v in &source.verdicts {
            out.push_str(&verdict(v));
        }
    }
    out
}

/// A failed command on stderr: what happened, then, when the problem is one an operator can
/// act on, what to do about it. `endpoint` is the `--endpoint-url` in use.
pub fn error(err: &CliError, endpoint: Option<&str>) -> String {
    let mut out = format!("resq: {err}\n");
    if let Some(problem) = crate::errors::classify(err) {
        out.push_str(&format!(
            "resq: {}\n",
            crate::errors::hint(&problem, endpoint)
        ));
    }
    out
}

fn line(value: serde_json::Value) -> String {
    format!("{value}\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use resq::mapping::MappingState;
    use resq::state::{PauseRecord, PauseState, PausedBy};

    use super::*;
    use crate::dlq::Peeked;
    use crate::status::QueueState;

    fn parse(text: &str) -> Value {
        assert!(text.ends_with('\n'), "{text:?}");
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    fn report() -> SendReport {
        SendReport {
            sent: 2,
            failed: vec![("ORD-3".into(), "InvalidMessageContents: bad".into())],
        }
    }

    #[test]
    fn send_plain_and_json() {
        assert_eq!(
            send(&report(), 3, "http://q/1/orders", false),
            "sent 2 of 3 orders to http://q/1/orders\n  not sent: ORD-3: InvalidMessageContents: bad\n"
        );
        let all = SendReport {
            sent: 3,
            failed: vec![],
        };
        assert_eq!(send(&all, 3, "u", false), "sent 3 of 3 orders to u\n");
        let v = parse(&send(&report(), 3, "http://q/1/orders", true));
        assert_eq!(v["sent"], 2);
        assert_eq!(
            v["failed"],
            json!([["ORD-3", "InvalidMessageContents: bad"]])
        );
    }

    fn state() -> Status {
        Status {
            queues: vec![
                QueueState {
                    label: "main",
                    url: "http://q/1/orders".into(),
                    visible: 12,
                    in_flight: 3,
                    oldest_age_seconds: Some(41.6),
                },
                QueueState {
                    label: "dlq",
                    url: "http://q/1/orders-dlq".into(),
                    visible: 1,
                    in_flight: 0,
                    oldest_age_seconds: None,
                },
            ],
            consumer: ConsumerStatus::NotConfigured,
            alarms: vec![("resq-dlq-depth".into(), "ALARM".into())],
        }
    }

    #[test]
    fn status_plain_and_json() {
        let table = status(&state(), NOW, false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "queue      waiting  in flight   oldest (s)  url");
        assert_eq!(
            lines[1],
            "main            12          3           42  http://q/1/orders"
        );
        assert_eq!(
            lines[2],
            "dlq              1          0            -  http://q/1/orders-dlq"
        );
        assert_eq!(lines[3], "");
        assert!(
            lines[4].starts_with("consumer breaker: not configured (no event source mapping named"),
            "{}",
            lines[4]
        );
        assert_eq!(lines[5], "");
        assert!(lines[6].starts_with("alarm ") && lines[6].ends_with(" state"));
        assert_eq!(
            lines[7].split_whitespace().collect::<Vec<_>>(),
            ["resq-dlq-depth", "ALARM"]
        );
        let quiet = Status {
            alarms: vec![],
            ..state()
        };
        assert!(status(&quiet, NOW, false).ends_with("\nno alarms with that prefix\n"));

        let v = parse(&status(&state(), NOW, true));
        assert_eq!(v["consumer"], json!({"configured": false}));
        assert_eq!(
            v["queues"][0],
            json!({"queue": "main", "url": "http://q/1/orders", "waiting": 12, "inFlight": 3, "oldestAgeSeconds": 41.6})
        );
        assert_eq!(v["queues"][1]["oldestAgeSeconds"], Value::Null);
        assert_eq!(
            v["alarms"],
            json!([{"name": "resq-dlq-depth", "state": "ALARM"}])
        );
    }

    /// 2027-01-15T08:00:00Z.
    const NOW: u64 = 1_800_000_000_000;

    fn pause_record(by: PausedBy, state: PauseState, since: u64) -> PauseRecord {
        let mut r = PauseRecord::new(MAPPING, state, by, since);
        r.since = Some(since);
        r
    }

    const MAPPING: &str = "7c1f0d2e-0000-4000-8000-00000000abcd";

    fn known(state: MappingState, record: Option<PauseRecord>) -> ConsumerStatus {
        ConsumerStatus::Known {
            mapping: MAPPING.into(),
            standing: crate::consumer::standing(&state, record.as_ref()),
            state,
            record,
        }
    }

    #[test]
    fn the_consumers_line_says_who_paused_it_since_when_and_why() {
        let line = |c: &ConsumerStatus| consumer_line(c, NOW);
        // running
        assert_eq!(
            line(&known(MappingState::Enabled, None)),
            format!("consumer: running\n  event source mapping {MAPPING}: Enabled")
        );
        // paused by resq: since when, which alarm, its probes
        let mut by_resq = pause_record(PausedBy::Resq, PauseState::Paused, NOW - 12 * 60_000);
        by_resq.alarms = vec!["resq-downstream-failing".into()];
        assert_eq!(
            line(&known(MappingState::Disabled, Some(by_resq.clone()))),
            format!(
                "consumer: paused by resq since 2027-01-15T07:48:00Z (12m ago), alarm resq-downstream-failing; no probe yet\n  event source mapping {MAPPING}: Disabled"
            )
        );
        by_resq.probes = 2;
        by_resq.last_probe_at = Some(NOW - 3 * 60_000);
        assert_eq!(
            line(&known(MappingState::Disabled, Some(by_resq.clone()))),
            format!(
                "consumer: paused by resq since 2027-01-15T07:48:00Z (12m ago), alarm resq-downstream-failing; 2 probes so far, the last at 2027-01-15T07:57:00Z (3m ago)\n  event source mapping {MAPPING}: Disabled"
            )
        );
        by_resq.state = PauseState::Probing;
        assert!(
            line(&known(MappingState::Enabled, Some(by_resq)))
                .contains("; probing now\n  event source mapping"),
        );
        // paused by hand: since when, who, why
        let mut by_hand = pause_record(
            PausedBy::Operator,
            PauseState::Paused,
            NOW - 2 * 3_600_000 - 5 * 60_000,
        );
        by_hand.who = Some("arn:aws:iam::123456789012:user/alice".into());
        by_hand.reason = Some("DB failover".into());
        assert_eq!(
            line(&known(MappingState::Disabled, Some(by_hand.clone()))),
            format!(
                "consumer: paused by hand since 2027-01-15T05:55:00Z (2h 5m ago) by arn:aws:iam::123456789012:user/alice, reason: DB failover\n  event source mapping {MAPPING}: Disabled; resq's breaker never resumes it (`resq consumer resume` does)"
            )
        );
        // disabled with no record, or after a resume
        let resumed = pause_record(PausedBy::Operator, PauseState::Resumed, NOW);
        for record in [None, Some(resumed)] {
            assert_eq!(
                line(&known(MappingState::Disabled, record)),
                format!(
                    "consumer: paused by hand (no record: disabled outside resq)\n  event source mapping {MAPPING}: Disabled; resq's breaker never resumes it (`resq consumer resume` does)"
                )
            );
        }
        // enabled outside resq after a pause
        assert!(
            line(&known(MappingState::Enabled, Some(by_hand))).starts_with(
                "consumer: running, although its latest record says paused by hand since 2027-01-15T05:55:00Z (2h 5m ago): enabled outside resq"
            )
        );
        // not configured, or not to be told
        assert!(
            line(&ConsumerStatus::NotConfigured).starts_with("consumer breaker: not configured")
        );
        assert_eq!(
            line(&ConsumerStatus::NoSuchMapping {
                mapping: "x".into()
            }),
            "consumer: unknown: no event source mapping x (below)"
        );
        // and in JSON: the standing, the state, the record
        let s = Status {
            consumer: known(
                MappingState::Disabled,
                Some(pause_record(PausedBy::Operator, PauseState::Paused, NOW)),
            ),
            ..state()
        };
        let v = parse(&status(&s, NOW, true));
        assert_eq!(
            v["consumer"],
            json!({"configured": true, "mapping": MAPPING, "state": "Disabled", "standing": "pausedByHand",
                "record": {"mapping": MAPPING, "state": "paused", "by": "operator", "at": NOW, "since": NOW}})
        );
    }

    #[test]
    fn a_pause_says_what_it_did_what_it_took_over_and_that_resq_never_undoes_it() {
        let mut record = pause_record(PausedBy::Operator, PauseState::Paused, NOW);
        record.who = Some("arn:aws:iam::123456789012:user/alice".into());
        record.reason = Some("DB failover".into());
        let mut by_resq = pause_record(PausedBy::Resq, PauseState::Paused, NOW - 60_000);
        by_resq.alarms = vec!["resq-downstream-failing".into()];
        let report = PauseReport {
            mapping: MAPPING.into(),
            was: MappingState::Disabled,
            now: MappingState::Disabled,
            previous: Ok(Some(by_resq)),
            record,
            written_to: "s3://b/state/consumer/k.json".into(),
        };
        assert_eq!(
            consumer_paused(&report, NOW, false),
            format!(
                "the consumer's event source mapping {MAPPING} was already Disabled: left so, and the pause recorded as yours\n\
                 it was paused by resq since 2027-01-15T07:59:00Z (1m ago), alarm resq-downstream-failing: the pause is yours now (resq's breaker no longer probes or resumes it)\n\
                 recorded in s3://b/state/consumer/k.json: paused by arn:aws:iam::123456789012:user/alice at 2027-01-15T08:00:00Z, reason: DB failover\n\
                 resq's breaker never resumes a pause made by hand: `resq consumer resume` does\n"
            )
        );
        let fresh = PauseReport {
            was: MappingState::Enabled,
            previous: Ok(None),
            ..report.clone()
        };
        assert!(
            consumer_paused(&fresh, NOW, false).starts_with(&format!(
                "paused the consumer: event source mapping {MAPPING} is Disabled (was Enabled)\nrecorded in"
            ))
        );
        let v = parse(&consumer_paused(&report, NOW, true));
        assert_eq!(v["before"], "pausedByResq");
        assert_eq!(v["record"]["by"], "operator");
        assert_eq!(v["recordedIn"], "s3://b/state/consumer/k.json");
    }

    #[test]
    fn a_resume_says_what_it_ended_and_what_it_was_forced_past() {
        let mut record = pause_record(PausedBy::Operator, PauseState::Resumed, NOW);
        record.who = Some("bob".into());
        record.forced = true;
        record.alarms = vec!["resq-downstream-failing".into()];
        let report = ResumeReport {
            mapping: MAPPING.into(),
            was: MappingState::Disabled,
            now: MappingState::Enabled,
            previous: Ok(None),
            record: Some((record, "s3://b/k.json".into())),
            unchecked: vec!["resq-consumer-errors".into()],
            alarms_unread: None,
        };
        assert_eq!(
            consumer_resumed(&report, NOW, false),
            format!(
                "resumed the consumer: event source mapping {MAPPING} is Enabled (was Disabled)\n\
                 it was disabled outside resq (no record)\n\
                 recorded in s3://b/k.json: resumed by bob at 2027-01-15T08:00:00Z\n\
                 forced past the breaker's alarm in ALARM: resq-downstream-failing; resq's breaker does not pause the consumer again until it has left ALARM once\n"
            )
        );
        assert_eq!(
            consumer_resumed_notes(&report),
            "note: the consumer breaker's alarm resq-consumer-errors does not exist: not checked\n"
        );
        let nothing = ResumeReport {
            was: MappingState::Enabled,
            now: MappingState::Enabled,
            record: None,
            ..report.clone()
        };
        assert!(
            consumer_resumed(&nothing, NOW, false)
                .ends_with("no pause is on record: nothing to resume\n")
        );
        let v = parse(&consumer_resumed(&report, NOW, true));
        assert_eq!(
            (v["resumed"].clone(), v["record"]["forced"].clone()),
            (json!(true), json!(true))
        );
        assert_eq!(v["unchecked"], json!(["resq-consumer-errors"]));
    }

    fn peeked() -> Vec<Peeked> {
        vec![
            Peeked {
                message_id: "m-1".into(),
                reason: Some("MALFORMED_JSON".into()),
                failure_class: Some("permanent".into()),
                redrive_count: Some("2".into()),
                age_seconds: Some(75),
                group: Some("tenant-a".into()),
                body: "{bad".into(),
            },
            Peeked {
                message_id: "m-2".into(),
                reason: None,
                failure_class: None,
                redrive_count: None,
                age_seconds: None,
                group: None,
                body: "{}".into(),
            },
        ]
    }

    /// A peek report of `shown`, the messages that match counted from their reasons and groups,
    /// `read` read in all.
    fn peek_report(shown: Vec<Peeked>, read: usize, more: bool) -> PeekReport {
        let keys: Vec<(Option<&str>, Option<&str>)> = shown
            .iter()
            .map(|p| (p.reason.as_deref(), p.group.as_deref()))
            .collect();
        let counts = dlq::Counts::of(read, &keys, more);
        PeekReport {
            unhidden: None,
            shown: shown.clone(),
            counts,
            waiting: 0,
            hidden: 0,
        }
    }

    #[test]
    fn peek_plain_and_json() {
        // GIVEN two messages shown (one of tenant-a, one without a group), of 5 read
        let report = peek_report(peeked(), 5, false);
        // THEN each is a line with its marks (its group when it has one), then the counts
        assert_eq!(
            peek(&report, false),
            "m-1  reason=MALFORMED_JSON class=permanent redrives=2 age=75s group=tenant-a\n  {bad\n\
             m-2  reason=- class=- redrives=0 age=?s\n  {}\n\
             2 matching of the 5 DLQ messages read, by reason:\n\
             \x20       1  MALFORMED_JSON\n\
             \x20       1  (no reason)\n\
             by group:\n\
             \x20       1  tenant-a\n\
             \x20       1  (no group)\n"
        );
        let nothing = peek_report(vec![], 5, false);
        assert_eq!(peek(&nothing, false), "no DLQ messages match\n");
        // AND as JSON: the messages and the counts, those without a group or reason as null
        let v = parse(&peek(&report, true));
        assert_eq!(v["messages"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["messages"][0],
            json!({"messageId": "m-1", "reason": "MALFORMED_JSON", "failureClass": "permanent", "redriveCount": "2", "ageSeconds": 75, "group": "tenant-a", "body": "{bad"})
        );
        assert_eq!(v["messages"][1]["reason"], Value::Null);
        assert_eq!(
            v["counts"],
            json!({
                "read": 5, "matching": 2, "more": false,
                "byReason": [{"reason": "MALFORMED_JSON", "messages": 1}, {"reason": null, "messages": 1}],
                "byGroup": [{"group": "tenant-a", "messages": 1}, {"group": null, "messages": 1}],
            })
        );
        assert_eq!(parse(&peek(&nothing, true))["messages"], json!([]));
    }

    #[test]
    fn peek_counts_name_the_largest_groups_and_sum_up_the_others() {
        // GIVEN more groups than are named, of different sizes
        let groups = COUNTS_NAMED + 3;
        let mut shown = Vec::new();
        for g in 0..groups {
            for i in 0..=g {
                shown.push(Peeked {
                    message_id: format!("m-{g}-{i}"),
                    group: Some(format!("tenant-{g:02}")),
                    ..peeked()[1].clone()
                });
            }
        }
        let total = shown.len();
        // WHEN only the counts are asked for (--limit 0: nothing shown)
        let mut report = peek_report(shown, total, true);
        report.shown.clear();
        let out = peek(&report, false);
        let by_group: Vec<&str> = out.split("by group:\n").nth(1).unwrap().lines().collect();
        // THEN the largest are named, the largest first, and the others summed up
        assert_eq!(by_group.len(), COUNTS_NAMED + 1, "{out}");
        assert_eq!(
            by_group[0].split_whitespace().collect::<Vec<_>>(),
            [
                groups.to_string().as_str(),
                &format!("tenant-{:02}", groups - 1)
            ]
        );
        let others: usize = (1..=3).sum();
        assert_eq!(
            by_group[COUNTS_NAMED]
                .split_whitespace()
                .collect::<Vec<_>>(),
            [others.to_string().as_str(), "in", "3", "more", "groups"]
        );
        let named: usize = by_group
            .iter()
            .map(|l| {
                l.split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum();
        assert_eq!(named, total, "every message counted once");
        // AND the counts say the DLQ holds more than was read
        assert!(
            out.contains(&format!(
                "{total} matching of the {total} DLQ messages read (the DLQ holds more)"
            )),
            "{out}"
        );
        assert!(
            peek_notes(&report).contains("the counts are of the first"),
            "{}",
            peek_notes(&report)
        );
        // AND JSON has every group
        assert_eq!(
            parse(&peek(&report, true))["counts"]["byGroup"]
                .as_array()
                .unwrap()
                .len(),
            groups
        );
    }

    #[test]
    fn peek_notes_say_what_was_unhidden_or_stays_hidden() {
        let kept = PeekReport {
            unhidden: Some(4),
            ..peek_report(peeked(), 2, false)
        };
        assert_eq!(
            peek_notes(&kept),
            "4 kept messages made visible (the next scheduled run keeps and hides them again)\n"
        );
        let hidden = PeekReport {
            hidden: 7,
            ..peek_report(vec![], 0, false)
        };
        let note = peek_notes(&hidden);
        assert!(
            note.starts_with("7 more DLQ messages are hidden: ") && note.contains("--kept"),
            "{note}"
        );
        assert_eq!(peek_notes(&peek_report(vec![], 0, false)), "");
    }

    fn summary(dry_run: bool) -> Summary {
        Summary {
            received: 5,
            redriven: 3,
            archived: BTreeMap::from([(resq::reason::ArchiveReason::RedriveCap, 1)]),
            skipped: 1,
            kept: 1,
            elapsed_ms: 120,
            ..Summary::new(dry_run, 10.0)
        }
    }

    #[test]
    fn redrive_prints_the_summary_and_a_dry_run_says_so() {
        let text = redrive(&summary(true));
        let v = parse(&text);
        assert_eq!(
            (
                &v["dryRun"],
                &v["redriven"],
                &v["archived"]["REDRIVE_CAP"],
                &v["stoppedBy"]
            ),
            (&json!(true), &json!(3), &json!(1), &json!("empty"))
        );
        assert!(text.lines().count() > 1, "pretty-printed: {text}");
        let done = |s: Summary, left: usize| crate::dlq::Redriven {
            summary: s,
            held: crate::hold::Released {
                released: 3,
                left,
                receives_cut_off: 0,
                back_within: Some(std::time::Duration::from_secs(42)),
            },
        };
        assert_eq!(
            redrive_notes(&done(summary(true), 0), false),
            "dry run: nothing was changed; run again without --dry-run to redrive\n"
        );
        assert_eq!(redrive_notes(&done(summary(true), 0), true), "");
        assert_eq!(redrive_notes(&done(summary(false), 0), false), "");
        // what it could not release is said, whatever the output
        assert_eq!(
            redrive_notes(&done(summary(false), 2), true),
            "warning: of the DLQ messages this run held, 2 could not be released: they come back by themselves within 42 s\n"
        );
    }

    #[test]
    fn archive_keys_plain_and_json() {
        let keys = vec![
            "archive/REDRIVE_CAP/2026/11/21/m-1.json".to_owned(),
            "archive/TTL_EXPIRED/2026/11/21/m-2.json".to_owned(),
        ];
        assert_eq!(
            archive_keys(&keys, false),
            "archive/REDRIVE_CAP/2026/11/21/m-1.json\narchive/TTL_EXPIRED/2026/11/21/m-2.json\n"
        );
        assert_eq!(archive_keys(&[], false), "");
        assert_eq!(parse(&archive_keys(&keys, true)), json!(keys));
        assert_eq!(archive_keys_notes(&keys, false), "2 entries\n");
        assert_eq!(archive_keys_notes(&keys, true), "");
    }

    #[test]
    fn archive_entry_as_stored() {
        let entry: ArchiveEnvelope = serde_json::from_value(json!({
            "originalMessage": {
                "messageId": "m-1",
                "body": "{\"orderId\":\"A\"}",
                "messageAttributes": {},
                "attributes": {}
            },
            "metadata": {
                "reason": "REDRIVE_CAP",
                "archivedAt": "2026-11-21T10:00:00.000Z",
                "archivedBy": "redriver",
                "sourceQueue": "http://q/1/orders",
                "redriveCount": 3,
                "receiveCount": 1,
                "firstSentAt": null,
                "lastError": null
            }
        }))
        .expect("an archive envelope");
        let text = archive_entry(&entry);
        let back: ArchiveEnvelope = serde_json::from_str(&text).unwrap();
        assert_eq!(back, entry);
        assert!(text.contains("\n  \"metadata\": {"), "{text}");
    }

    #[test]
    fn restored_plain_and_json() {
        let key = "archive/REDRIVE_CAP/2026/11/21/m-1.json";
        assert_eq!(
            restored(key, Some("id-9"), false),
            format!("restored {key} as message id-9\n")
        );
        assert_eq!(restored(key, None, false), format!("would restore {key}\n"));
        assert_eq!(
            parse(&restored(key, Some("id-9"), true)),
            json!({"key": key, "restored": true, "messageId": "id-9"})
        );
        assert_eq!(
            parse(&restored(key, None, true)),
            json!({"key": key, "restored": false, "dryRun": true})
        );
    }

    #[test]
    fn errors_with_and_without_a_hint() {
        let refused = CliError::Aws {
            what: "reading http://127.0.0.1:9/1/dlq".into(),
            source: resq::error::AwsError {
                code: None,
                message: "dispatch failure: Connection refused".into(),
                kind: resq::error::AwsErrorKind::Unreachable,
            },
        };
        let text = error(&refused, Some("http://127.0.0.1:9"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "resq: reading http://127.0.0.1:9/1/dlq: dispatch failure: Connection refused"
        );
        assert!(
            lines[1].starts_with("resq: the endpoint http://127.0.0.1:9 did not answer"),
            "{text}"
        );
        assert_eq!(lines.len(), 2);
        let missing = CliError::Missing {
            flag: "--dlq-url",
            var: "DLQ_URL",
            hint: "the stack output DeadLetterQueueUrl has it",
        };
        assert_eq!(
            error(&missing, None),
            "resq: --dlq-url (or DLQ_URL) is required: the stack output DeadLetterQueueUrl has it\n"
        );
    }

    fn finding() -> crate::find::Finding {
        use crate::locate::{Kept, Look, Queued, Recorded};
        let places = vec![
            Place::Recorded(Recorded {
                key: "orders/ORD-1.json".into(),
                writes: 2,
                written_at: vec![1_795_000_000_000, 1_795_000_060_000],
                current: true,
            }),
            Place::Dlq(Queued {
                message_id: "m-2".into(),
                receive_count: Some(1),
                redrive_count: Some("1".into()),
                failure_class: Some("transient".into()),
                failure_reason: Some("DOWNSTREAM_UNAVAILABLE".into()),
                sent_at: Some(1_795_000_000_000),
                first_sent_at: Some(1_795_000_000_000),
                group: None,
                matched_by_text: false,
            }),
            Place::Kept(Kept {
                message_id: "m-3".into(),
                failure_reason: Some("VALIDATION_FAILED".into()),
                hidden_until: 1_795_086_400_000,
            }),
        ];
        let mut look = Look::of_one("ORD-1", &places);
        look.coverage.main_queue.looked = true;
        look.coverage.main_queue.received = 12;
        look.coverage.main_queue.max_receive_count = Some(5);
        look.coverage.main_queue.hidden_for_seconds = 30;
        look.coverage.main_queue.last_receive_used = 1;
        look.coverage.main_queue.in_flight = 2;
        look.coverage.dlq.looked = true;
        look.coverage.kept_read = true;
        look.coverage.kept_listed = 1;
        look.coverage.archive_read = 7;
        crate::find::Finding {
            order_id: "ORD-1".into(),
            places,
            look,
        }
    }

    #[test]
    fn find_lists_every_place_and_says_what_the_look_cost() {
        let f = finding();
        let now = 1_795_000_042_000;
        assert_eq!(
            find(&f, now, false),
            "ORD-1: seen in 3 places\n\
             \x20 recorded    orders/ORD-1.json written 2 times: the order's effect was written more than once, last at 2026-11-18T11:07:40Z\n\
             \x20 DLQ         message m-2 class=transient reason=DOWNSTREAM_UNAVAILABLE redrives=1 age=42s\n\
             \x20 kept        message m-3 reason=VALIDATION_FAILED: a permanent failure kept in the DLQ for a human, hidden by the redriver until 2026-11-19T11:06:40Z (`resq dlq peek --kept` shows it)\n"
        );
        let notes = find_notes(&f, false);
        let lines: Vec<&str> = notes.lines().collect();
        assert_eq!(
            lines[0],
            "looked at: the order records; 7 archive entries; the main queue: 12 messages received, once each (ApproximateReceiveCount +1 toward maxReceiveCount 5; hidden from the consumer for at most 30 s, released at once); the DLQ: nothing received (nothing visible); the keep lists: 1 kept messages listed (those of this order checked, their hide left as it was)"
        );
        assert!(lines[1].starts_with(
            "warning: this look used the last allowed receive of 1 main-queue message(s)"
        ));
        assert_eq!(
            lines[2],
            "not seen: 2 messages in flight in the main queue (being processed or backed off) cannot be received"
        );
        assert_eq!(find_notes(&f, true), "");
        let v = parse(&find(&f, now, true));
        assert_eq!(v["verdict"], "found");
        assert_eq!(v["places"][0]["place"], "recorded");
        assert_eq!(v["places"][0]["writes"], 2);
        assert_eq!(v["places"][1]["failureReason"], "DOWNSTREAM_UNAVAILABLE");
        assert_eq!(v["coverage"]["mainQueue"]["lastReceiveUsed"], 1);
        let nowhere = crate::find::Finding {
            places: vec![],
            ..f
        };
        assert_eq!(find(&nowhere, now, false), "ORD-1: seen nowhere\n");
    }

    #[test]
    fn find_narrowed_to_a_group_says_so_and_names_the_copies_it_left_out() {
        // GIVEN a look narrowed to tenant-b that saw the order's DLQ copy of tenant-b, and left
        // out one of tenant-a
        let mut f = finding();
        if let Place::Dlq(q) = &mut f.places[1] {
            q.group = Some("tenant-b".into());
        }
        f.look.coverage.group = Some("tenant-b".into());
        f.look.coverage.dlq.other_groups = BTreeMap::from([("tenant-a".to_owned(), 1)]);
        let now = 1_795_000_042_000;
        // THEN the copy's line names its group
        let out = find(&f, now, false);
        assert!(
            out.contains("  DLQ         message m-2 class=transient reason=DOWNSTREAM_UNAVAILABLE redrives=1 age=42s group=tenant-b\n"),
            "{out}"
        );
        // AND the notes say the queues were narrowed, and what was left out
        let notes = find_notes(&f, false);
        assert!(
            notes.lines().any(|l| l.starts_with("narrowed to group tenant-b (--group): in the main queue and the DLQ, only messages of MessageGroupId tenant-b were looked at")),
            "{notes}"
        );
        assert!(
            notes.contains("not seen: 1 DLQ messages of the order are of other groups, left out by --group tenant-b: tenant-a 1\n"),
            "{notes}"
        );
        // AND --json has the group of each copy and of the look
        let v = parse(&find(&f, now, true));
        assert_eq!(v["places"][1]["group"], "tenant-b");
        assert_eq!(v["coverage"]["group"], "tenant-b");
        assert_eq!(v["coverage"]["dlq"]["otherGroups"], json!({"tenant-a": 1}));
        // AND a look not narrowed says nothing of groups
        assert!(!find_notes(&finding(), false).contains("group"));
    }
}
