//! The handler port (what users implement): the engine runs a [`MessageHandler`], which parses
//! and validates a body into the team's own message type (a [`Rejection`] is a permanent
//! failure), then applies its effect (a [`HandlerError`] says transient or permanent). resq's
//! own orders and their reference handler are in [`crate::order`]. See docs/design.md,
//! "Consumer".

use std::future::Future;

use resq::reason::FailureReason;
use resq::telemetry::Names;

/// Facts about the record an order came in, for handlers that need them.
#[derive(Debug, Clone, Copy)]
pub struct RecordMeta<'a> {
    /// SQS message id (changes when a message is redriven: never key effects by it).
    pub message_id: &'a str,
    /// `ApproximateReceiveCount` of this copy.
    pub receive_count: u32,
    /// `x-redrive-count` (times replayed from the DLQ).
    pub redrive_count: u32,
}

/// A handler's failure. Only the message's own content makes a failure permanent; AWS,
/// network and configuration problems are transient.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth retrying later: the record is reported failed and backed off.
    #[error("transient {code}: {details}")]
    Transient {
        /// Machine code (`S3_PUT_FAILED`, …).
        code: String,
        /// What happened.
        details: String,
    },
    /// Retrying cannot help: the record goes to the DLQ with `x-failure-class=permanent`.
    #[error("permanent {code}: {details}")]
    Permanent {
        /// Machine code, written to `x-failure-reason`.
        code: String,
        /// What happened.
        details: String,
    },
}

impl HandlerError {
    /// A transient failure.
    pub fn transient(code: impl Into<String>, details: impl Into<String>) -> Self {
        Self::Transient {
            code: code.into(),
            details: details.into(),
        }
    }

    /// A permanent failure.
    pub fn permanent(code: impl Into<String>, details: impl Into<String>) -> Self {
        Self::Permanent {
            code: code.into(),
            details: details.into(),
        }
    }
}

/// Why a body is not a valid message: a permanent failure. The record goes to the DLQ with
/// `x-failure-class=permanent` and `x-failure-reason` = [`Rejection::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {details}")]
pub struct Rejection {
    /// The failure reason (`MALFORMED_JSON`, `VALIDATION_FAILED`, or the handler's own).
    pub code: String,
    /// What is wrong, in words.
    pub details: String,
    /// The business id when one could be read, for log correlation.
    pub business_id: Option<String>,
}

impl Rejection {
    /// A body that is not JSON (or no body): `MALFORMED_JSON`.
    pub fn malformed(details: impl Into<String>) -> Self {
        Self::new(FailureReason::MalformedJson.code(), details)
    }

    /// JSON that breaks the message's rules: `VALIDATION_FAILED`.
    pub fn invalid(details: impl Into<String>) -> Self {
        Self::new(FailureReason::ValidationFailed.code(), details)
    }

    /// A rejection with a failure reason of the handler's own.
    pub fn new(code: impl Into<String>, details: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            details: details.into(),
            business_id: None,
        }
    }

    /// The same rejection, naming the business id it read.
    pub fn with_business_id(mut self, business_id: Option<String>) -> Self {
        self.business_id = business_id;
        self
    }
}

/// What the engine runs for each record that is under the redrive cap: the team's own message
/// type, its parsing and validation, and its effect.
pub trait MessageHandler: Send + Sync {
    /// A valid message.
    type Message: Send + Sync;

    /// Parses and validates one body (`None`: the record had none). `Err` is permanent: the
    /// record goes to the DLQ with the rejection's code.
    fn parse(&self, body: Option<&str>) -> Result<Self::Message, Rejection>;

    /// How the message type names itself in logs and metrics: the `service`, the metrics'
    /// namespace, and its business id's log key (written beside `correlation_id`) and body
    /// field (read from a body that did not parse). resq's orders by default
    /// ([`Names::ORDERS`]: `orders`, `resq`, `order_id`, `orderId`); the environment overrides
    /// each (`POWERTOOLS_SERVICE_NAME`, `POWERTOOLS_METRICS_NAMESPACE`, `RESQ_CORRELATION_KEY`,
    /// `RESQ_CORRELATION_FIELD`: [`resq::telemetry::Telemetry::from_vars`]). Declare your own:
    /// `const NAMES: Names = Names { service: "payments", correlation_key: "payment_id",
    /// correlation_field: "paymentId", ..Names::ORDERS };`
    const NAMES: Names = Names::ORDERS;

    /// The message's business id: what its effect is keyed by (never the SQS message id,
    /// which changes on every redrive), logged as the record's `correlation_id` and under
    /// [`Self::NAMES`]' correlation key (`order_id`).
    fn business_id<'m>(&self, message: &'m Self::Message) -> &'m str;

    /// Applies the message's effect. Must be idempotent by business id: at-least-once
    /// delivery and redrive both deliver the same message again.
    fn handle(
        &self,
        message: &Self::Message,
        meta: &RecordMeta<'_>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}
