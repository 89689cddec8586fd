//! The order handler port (what users implement) and the shipped reference handler.

use std::future::Future;

use resq::store::{ObjectStore, PutOutcome};
use serde_json::json;

use crate::order::Order;

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

/// Where the reference handler records an order.
pub fn order_key(order: &Order) -> String {
    format!("orders/{}.json", order.order_id)
}

/// The reference handler: records the order once as `orders/{orderId}.json` with a
/// conditional put. An existing record means the order was already done: success.
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
        let record = json!({
            "order": order.document,
            "messageId": meta.message_id,
            "recordedAt": resq::archive::timestamp(chrono::Utc::now()),
        });
        let body = serde_json::to_vec(&record)
            .map_err(|e| HandlerError::transient("SERIALIZE_FAILED", e.to_string()))?;
        match self.store.put_if_absent(&order_key(order), body).await {
            Ok(PutOutcome::Created) => Ok(()),
            Ok(PutOutcome::AlreadyExists) => {
                tracing::info!(order_id = %order.order_id, "order already recorded; treating as done");
                Ok(())
            }
            Err(e) => Err(HandlerError::transient(
                "ORDER_RECORD_FAILED",
                e.to_string(),
            )),
        }
    }
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
