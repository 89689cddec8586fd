//! An example of resq as a library: a payments team's own message type and handler on resq's
//! consumer engine, with everything else (the redrive cap, permanent failures to the DLQ,
//! backoff, FIFO lanes, the deadline, archive, metrics) as resq does it for orders.
//!
//! A payment is `{"paymentId", "accountId", "amountCents" > 0, "currency": "EUR" | "USD" | …}`.
//! Parsing and validation are the team's ([`MessageHandler::parse`]); a payment in a currency
//! the team does not settle is a permanent failure of the team's own (`CURRENCY_UNSUPPORTED`);
//! the effect records the payment once, keyed by its business id.
#![warn(missing_docs)]

use resq::store::{ObjectStore, PutOutcome};
use resq::telemetry::Names;
use resq_consumer::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};
use serde::Deserialize;

/// Currencies this team settles.
pub const CURRENCIES: [&str; 3] = ["EUR", "USD", "GBP"];

/// A valid payment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payment {
    /// The business id: the effect is keyed by it.
    pub payment_id: String,
    /// Whose account.
    pub account_id: String,
    /// How much, in cents; at least 1.
    pub amount_cents: u64,
    /// ISO 4217 code.
    pub currency: String,
}

/// Where a payment is recorded. The template's consumer role may write `orders/*` and
/// `archive/*` only: deploying this handler adds `payments/*` to its `s3:PutObject` resources
/// (and, for the records to expire, a lifecycle rule for the prefix).
pub fn payment_key(p: &Payment) -> String {
    format!("payments/{}.json", p.payment_id)
}

/// The team's handler: records each payment once in the store.
#[derive(Debug, Clone)]
pub struct RecordPayment<S> {
    store: S,
}

impl<S: ObjectStore> RecordPayment<S> {
    /// A handler writing through `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }
}

impl<S: ObjectStore> MessageHandler for RecordPayment<S> {
    type Message = Payment;

    /// Its lines and metrics say `service` `payments`, and follow a payment as
    /// `correlation_id` and `payment_id` (read from `paymentId` when the body did not parse);
    /// the namespace stays resq's.
    const NAMES: Names = Names {
        service: "payments",
        correlation_key: "payment_id",
        correlation_field: "paymentId",
        ..Names::ORDERS
    };

    fn parse(&self, body: Option<&str>) -> Result<Payment, Rejection> {
        let body = body.ok_or_else(|| Rejection::malformed("the message has no body"))?;
        let value: serde_json::Value = serde_json::from_str(body)
            .map_err(|e| Rejection::malformed(format!("body is not JSON: {e}")))?;
        let id = value
            .get("paymentId")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let payment: Payment = serde_json::from_value(value)
            .map_err(|e| Rejection::invalid(e.to_string()).with_business_id(id.clone()))?;
        let bad_id = payment.payment_id.is_empty()
            || payment
                .payment_id
                .chars()
                .any(|c| !c.is_ascii_alphanumeric() && c != '-');
        if bad_id {
            return Err(
                Rejection::invalid("paymentId must be letters, digits and '-'")
                    .with_business_id(id),
            );
        }
        if payment.amount_cents == 0 {
            return Err(Rejection::invalid("amountCents must be at least 1").with_business_id(id));
        }
        Ok(payment)
    }

    fn business_id<'m>(&self, payment: &'m Payment) -> &'m str {
        &payment.payment_id
    }

    async fn handle(&self, payment: &Payment, meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        if !CURRENCIES.contains(&payment.currency.as_str()) {
            return Err(HandlerError::permanent(
                "CURRENCY_UNSUPPORTED",
                format!("{} is not settled here", payment.currency),
            ));
        }
        let record = serde_json::json!({
            "paymentId": payment.payment_id,
            "accountId": payment.account_id,
            "amountCents": payment.amount_cents,
            "currency": payment.currency,
            "messageId": meta.message_id,
            "recordedAt": resq::archive::timestamp(chrono::Utc::now()),
        });
        let body = serde_json::to_vec(&record)
            .map_err(|e| HandlerError::transient("SERIALIZE_FAILED", e.to_string()))?;
        match self.store.put_if_absent(&payment_key(payment), body).await {
            // an existing record: this payment was already done (at-least-once delivery)
            Ok(PutOutcome::Created | PutOutcome::AlreadyExists) => Ok(()),
            Err(e) => Err(HandlerError::transient(
                "PAYMENT_RECORD_FAILED",
                e.to_string(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_testing::MemoryStore;

    #[test]
    fn parsing_names_the_reason() {
        let h = RecordPayment::new(MemoryStore::default());
        let ok = r#"{"paymentId":"p-1","accountId":"a","amountCents":5,"currency":"EUR"}"#;
        assert_eq!(h.parse(Some(ok)).unwrap().payment_id, "p-1");
        assert_eq!(h.parse(Some("{")).unwrap_err().code, "MALFORMED_JSON");
        assert_eq!(h.parse(None).unwrap_err().code, "MALFORMED_JSON");
        let zero = r#"{"paymentId":"p-2","accountId":"a","amountCents":0,"currency":"EUR"}"#;
        let r = h.parse(Some(zero)).unwrap_err();
        assert_eq!(
            (r.code.as_str(), r.business_id.as_deref()),
            ("VALIDATION_FAILED", Some("p-2"))
        );
        let slash = r#"{"paymentId":"p/3","accountId":"a","amountCents":1,"currency":"EUR"}"#;
        assert_eq!(h.parse(Some(slash)).unwrap_err().code, "VALIDATION_FAILED");
    }

    #[test]
    fn its_names_are_accepted_and_read_a_payments_id() {
        let t = resq::telemetry::Telemetry::of(
            <RecordPayment<MemoryStore> as MessageHandler>::NAMES,
            "payments-consumer",
            None,
        )
        .unwrap();
        assert_eq!(
            (t.service.as_str(), t.namespace.as_str()),
            ("payments", "resq")
        );
        assert_eq!(
            t.correlation
                .read(r#"{"paymentId":"p-1","amountCents":0}"#)
                .as_deref(),
            Some("p-1")
        );
    }
}
