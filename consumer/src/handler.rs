//! The handler ports (what users implement) and the shipped reference order handler.
//!
//! The engine runs a [`MessageHandler`]: parse and validate a body into the team's own message
//! type (a [`Rejection`] is a permanent failure), then apply its effect (a [`HandlerError`]
//! says transient or permanent). For orders, [`OrderHandler`] is the effect alone: every
//! `OrderHandler` is a `MessageHandler` of [`Order`] that parses with
//! [`parse_order`]. See docs/design.md, "Consumer".

use std::future::Future;

use resq::reason::FailureReason;
use resq::store::{ObjectStore, PutOutcome};
use resq::telemetry::Names;

use crate::order::{Order, parse_order};

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

/// Every order handler is a message handler of [`Order`], parsed by [`parse_order`].
impl<H: OrderHandler> MessageHandler for H {
    type Message = Order;

    const NAMES: Names = Names::ORDERS;

    fn parse(&self, body: Option<&str>) -> Result<Order, Rejection> {
        parse_order(body)
    }

    fn business_id<'m>(&self, order: &'m Order) -> &'m str {
        order.order_id.as_str()
    }

    fn handle(
        &self,
        order: &Order,
        meta: &RecordMeta<'_>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        OrderHandler::handle(self, order, meta)
    }
}

/// What the consumer runs for each valid order. Implementations must be idempotent by
/// `orderId`: at-least-once delivery and redrive both deliver the same order again.
pub trait OrderHandler: Send + Sync {
    /// Applies the order's effect.
    fn handle(
        &self,
        order: &Order,
        meta: &RecordMeta<'_>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

/// What the reference handler needs: conditional puts of order records under `orders/`, and
/// reading one back when it exists (is it the same order?).
pub const PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("s3:PutObject", "ArchiveBucket/orders/*"),
    resq::iam::Permission::new("s3:GetObject", "ArchiveBucket/orders/*"),
];

/// Where the reference handler records an order.
pub fn order_key(order: &Order) -> String {
    format!("orders/{}.json", order.order_id)
}

/// The reference handler: records the order once as `orders/{orderId}.json` with a
/// conditional put. An existing record of the same order (the same `userId` and `items`) means
/// it was already done: success (a redelivery, a replay, a producer's retry). A record of a
/// different order under the same `orderId` is a permanent failure, `ORDER_ID_CONFLICT`: the
/// new order goes to the DLQ, never acknowledged as done.
#[derive(Debug, Clone)]
pub struct RecordOrder<S> {
    store: S,
}

impl<S: ObjectStore> RecordOrder<S> {
    /// A handler writing through `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }
}

impl<S: ObjectStore> OrderHandler for RecordOrder<S> {
    async fn handle(&self, order: &Order, meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        // the order as sent, byte for byte (a number no f64 holds, 1e400, stays as written:
        // through a JSON tree it would not serialize)
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct OrderRecord<'a> {
            order: &'a serde_json::value::RawValue,
            message_id: &'a str,
            recorded_at: String,
        }
        let record = OrderRecord {
            order: &order.document,
            message_id: meta.message_id,
            recorded_at: resq::archive::timestamp(chrono::Utc::now()),
        };
        let body = serde_json::to_vec(&record)
            .map_err(|e| HandlerError::transient("SERIALIZE_FAILED", e.to_string()))?;
        match self.store.put_if_absent(&order_key(order), body).await {
            Ok(PutOutcome::Created) => Ok(()),
            Ok(PutOutcome::AlreadyExists) => self.already_recorded(order).await,
            Err(e) => Err(HandlerError::transient(
                "ORDER_RECORD_FAILED",
                e.to_string(),
            )),
        }
    }
}

impl<S: ObjectStore> RecordOrder<S> {
    /// An order whose record exists: done when the record is of the same order, a conflict
    /// when it is of another.
    async fn already_recorded(&self, order: &Order) -> Result<(), HandlerError> {
        let key = order_key(order);
        let stored = match self.store.get(&key).await {
            Ok(Some(stored)) => stored,
            // gone between the two calls (its lifecycle ended): try again
            Ok(None) => {
                return Err(HandlerError::transient(
                    "ORDER_RECORD_FAILED",
                    format!("{key} existed, then could not be found"),
                ));
            }
            Err(e) => {
                return Err(HandlerError::transient(
                    "ORDER_RECORD_FAILED",
                    e.to_string(),
                ));
            }
        };
        match same_order(&stored, order) {
            Ok(()) => {
                tracing::info!("order already recorded; treating as done");
                Ok(())
            }
            Err(difference) => Err(HandlerError::permanent(
                FailureReason::OrderIdConflict.code(),
                format!("{key} records a different order: {difference}"),
            )),
        }
    }
}

/// Whether the order record `stored` is of `order`: the same `userId`, and the same `items`
/// in any order. Otherwise, what differs.
pub fn same_order(stored: &[u8], order: &Order) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Stored<'a> {
        #[serde(borrow)]
        order: &'a serde_json::value::RawValue,
    }
    let recorded = serde_json::from_slice::<Stored<'_>>(stored)
        .map_err(|e| format!("the record is not an order record ({e})"))
        .and_then(|s| {
            parse_order(Some(s.order.get()))
                .map_err(|r| format!("the recorded order does not read ({r})"))
        })?;
    if recorded.user_id != order.user_id {
        return Err(format!(
            "userId {:?} there, {:?} here",
            recorded.user_id, order.user_id
        ));
    }
    let sorted = |o: &Order| {
        let mut items: Vec<(String, u64)> = o
            .items
            .iter()
            .map(|i| (i.product_id.clone(), i.quantity))
            .collect();
        items.sort();
        items
    };
    if sorted(&recorded) != sorted(order) {
        return Err(format!(
            "items {:?} there, {:?} here",
            sorted(&recorded),
            sorted(order)
        ));
    }
    Ok(())
}

impl<T: OrderHandler> OrderHandler for &T {
    fn handle(
        &self,
        order: &Order,
        meta: &RecordMeta<'_>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        (**self).handle(order, meta)
    }
}
