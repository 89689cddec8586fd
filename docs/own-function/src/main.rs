//! Settles payments from an SQS queue on resq's consumer engine: each payment is recorded once,
//! keyed by its id, in the team's own bucket (`HANDLER_CONFIG` names it). resq does the rest:
//! the batch response, backoff, the DLQ with reasons, the redrive cap, archive, metrics.

use std::process::ExitCode;

use resq::store::{ObjectStore, PutOutcome, S3Store};
use resq::telemetry::Names;
use resq_consumer::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};
use serde::Deserialize;

/// `{"paymentId": "p-1", "accountId": "a-1", "amountCents": 1250, "currency": "EUR"}`
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Payment {
    payment_id: String,
    account_id: String,
    amount_cents: u64,
    currency: String,
}

/// Currencies this team settles; any other is a permanent failure of its own.
const CURRENCIES: [&str; 3] = ["EUR", "USD", "GBP"];

/// Records each payment once in the team's bucket.
struct SettlePayment {
    ledger: S3Store,
}

impl MessageHandler for SettlePayment {
    type Message = Payment;

    /// Its logs and metrics: service `payments`, the id as `payment_id` (read from `paymentId`
    /// in a body that did not parse); the namespace stays resq's. The stack's settings
    /// (`POWERTOOLS_SERVICE_NAME`, `RESQ_CORRELATION_KEY`, …) override them when deployed.
    const NAMES: Names = Names {
        service: "payments",
        correlation_key: "payment_id",
        correlation_field: "paymentId",
        ..Names::ORDERS
    };

    fn parse(&self, body: Option<&str>) -> Result<Payment, Rejection> {
        let body = body.ok_or_else(|| Rejection::malformed("the message has no body"))?;
        let payment: Payment = serde_json::from_str(body).map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                Rejection::malformed(format!("body is not JSON: {e}"))
            } else {
                Rejection::invalid(e.to_string())
            }
        })?;
        let id = Some(payment.payment_id.clone());
        let id_ok = !payment.payment_id.is_empty()
            && payment
                .payment_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !id_ok {
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
        });
        let key = format!("payments/{}.json", payment.payment_id);
        match self
            .ledger
            .put_if_absent(&key, record.to_string().into_bytes())
            .await
        {
            // already there: a redelivery of a payment settled before
            Ok(PutOutcome::Created | PutOutcome::AlreadyExists) => Ok(()),
            // the ledger is unreachable: retried later, with backoff
            Err(e) => Err(HandlerError::transient("LEDGER_UNAVAILABLE", e.to_string())),
        }
    }
}

fn main() -> ExitCode {
    resq::lambda::main("settle-payments", || async {
        let ledger = std::env::var("HANDLER_CONFIG")
            .map_err(|_| "HANDLER_CONFIG is not set: the bucket payments are recorded in")?;
        // the handler's own client, built from the AWS configuration resq's clients share
        resq_consumer::lambda::serve(move |resources| SettlePayment {
            ledger: S3Store::new(resq::aws::s3_client(&resources.aws), ledger),
        })
        .await
    })
}
