//! Orders, resq's own message type: parsing and validation of one record's body
//! (docs/design.md, "Record checks"), and the shipped reference handler that records each
//! order once.
//!
//! A body that is not JSON is `MALFORMED_JSON`; JSON that is not a valid order is
//! `VALIDATION_FAILED`, with every problem listed so a human can fix the producer. An
//! [`OrderHandler`] is the effect alone: every `OrderHandler` is a
//! [`MessageHandler`] of [`Order`] that parses with
//! [`parse_order`].

use std::borrow::Cow;
use std::future::Future;

use resq::reason::FailureReason;
use resq::store::{ObjectStore, PutOutcome};
use resq::telemetry::Names;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};

/// Longest accepted `orderId`.
pub const MAX_ORDER_ID_LEN: usize = 128;

/// The business id: keys the order's effect, so it must be safe in an S3 key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct OrderId(String);

impl OrderId {
    /// 1–128 printable ASCII characters, no spaces and no `/` or `\`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("orderId must not be empty".into());
        }
        if raw.len() > MAX_ORDER_ID_LEN {
            return Err(format!(
                "orderId is {} characters long; at most {MAX_ORDER_ID_LEN} are allowed",
                raw.len()
            ));
        }
        if let Some(c) = raw
            .chars()
            .find(|c| !c.is_ascii_graphic() || matches!(c, '/' | '\\'))
        {
            let shown = if c.is_control() {
                format!("the control character U+{:04X}", u32::from(c))
            } else if c.is_ascii() {
                format!("'{c}'")
            } else {
                format!("'{c}' (U+{:04X})", u32::from(c))
            };
            return Err(format!(
                "orderId contains {shown}; only printable ASCII without spaces, '/' or '\\' is allowed"
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for OrderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderItem {
    /// The product.
    pub product_id: String,
    /// How many; at least 1.
    pub quantity: u64,
}

/// A validated order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The business id.
    pub order_id: OrderId,
    /// Who ordered.
    pub user_id: String,
    /// What was ordered; never empty.
    pub items: Vec<OrderItem>,
    /// The whole JSON document as sent, other fields included; for fields resq does not
    /// validate, `serde_json::from_str(order.document.get())`.
    #[serde(skip)]
    pub document: Box<RawValue>,
}

impl PartialEq for Order {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.order_id,
            &self.user_id,
            &self.items,
            self.document.get(),
        ) == (
            &other.order_id,
            &other.user_id,
            &other.items,
            other.document.get(),
        )
    }
}

/// Parses and validates one body.
pub fn parse_order(body: Option<&str>) -> Result<Order, Rejection> {
    let body = body.ok_or_else(|| Rejection::malformed("the message has no body"))?;
    if let Some(order) = fast_path(body) {
        return Ok(order);
    }
    let document: Value = serde_json::from_str(body)
        .map_err(|e| Rejection::malformed(format!("body is not JSON: {e}")))?;
    validate(document)
}

/// An order read straight into its fields, borrowing from the body where it can.
#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(rename = "orderId", borrow)]
    order_id: Cow<'a, str>,
    #[serde(rename = "userId", borrow)]
    user_id: Cow<'a, str>,
    #[serde(borrow)]
    items: Vec<TypedItem<'a>>,
}

#[derive(Deserialize)]
struct TypedItem<'a> {
    #[serde(rename = "productId", borrow)]
    product_id: Cow<'a, str>,
    quantity: u64,
}

/// The common case without building a JSON tree: a body that reads as an order and passes every
/// rule. Anything else (`None`) takes the full path, which names every problem; both paths
/// accept exactly the same orders (the tests check it).
fn fast_path(body: &str) -> Option<Order> {
    let t: Typed<'_> = serde_json::from_str(body).ok()?;
    let blank = |s: &str| s.trim().is_empty();
    if t.items.is_empty()
        || blank(&t.user_id)
        || t.items
            .iter()
            .any(|i| i.quantity < 1 || blank(&i.product_id))
    {
        return None;
    }
    Some(Order {
        order_id: OrderId::parse(&t.order_id).ok()?,
        user_id: t.user_id.into_owned(),
        items: t
            .items
            .into_iter()
            .map(|i| OrderItem {
                product_id: i.product_id.into_owned(),
                quantity: i.quantity,
            })
            .collect(),
        document: RawValue::from_string(body.to_owned()).ok()?,
    })
}

fn validate(document: Value) -> Result<Order, Rejection> {
    let invalid = |problems: Vec<String>, order_id: Option<String>| {
        Rejection::invalid(problems.join("; ")).with_business_id(order_id)
    };
    let Some(obj) = document.as_object() else {
        return Err(invalid(
            vec![format!(
                "an order must be a JSON object, got {}",
                kind(&document)
            )],
            None,
        ));
    };
    let mut problems = Vec::new();
    let raw_id = obj
        .get("orderId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let order_id = match obj.get("orderId") {
        Some(Value::String(s)) => OrderId::parse(s).map_err(|e| problems.push(e)).ok(),
        Some(other) => {
            problems.push(format!("orderId must be a string, got {}", kind(other)));
            None
        }
        None => {
            problems.push("orderId is missing".into());
            None
        }
    };
    let user_id = non_empty_string(obj, "userId", &mut problems);
    let items = items_of(obj, &mut problems);
    match (order_id, user_id, problems.is_empty()) {
        (Some(order_id), Some(user_id), true) => Ok(Order {
            order_id,
            user_id,
            items,
            document: serde_json::value::to_raw_value(&document).map_err(|e| {
                Rejection::malformed(format!("body cannot be kept as JSON: {e}"))
                    .with_business_id(raw_id.clone())
            })?,
        }),
        _ => Err(invalid(problems, raw_id)),
    }
}

/// `items`: a non-empty array of valid items; what is wrong with it goes to `problems`.
fn items_of(obj: &serde_json::Map<String, Value>, problems: &mut Vec<String>) -> Vec<OrderItem> {
    let mut items = Vec::new();
    match obj.get("items") {
        Some(Value::Array(list)) if list.is_empty() => {
            problems.push("items must not be empty".into())
        }
        Some(Value::Array(list)) => {
            for (i, item) in list.iter().enumerate() {
                match item_of(item) {
                    Ok(it) => items.push(it),
                    Err(mut e) => {
                        e.iter_mut().for_each(|p| *p = format!("items[{i}].{p}"));
                        problems.extend(e);
                    }
                }
            }
        }
        Some(other) => problems.push(format!("items must be an array, got {}", kind(other))),
        None => problems.push("items is missing".into()),
    }
    items
}

fn item_of(item: &Value) -> Result<OrderItem, Vec<String>> {
    let Some(obj) = item.as_object() else {
        return Err(vec![format!("item must be an object, got {}", kind(item))]);
    };
    let mut problems = Vec::new();
    let product_id = non_empty_string(obj, "productId", &mut problems);
    let quantity = match obj.get("quantity") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(q) if q >= 1 => Some(q),
            _ => {
                problems.push(format!("quantity must be a positive integer, got {n}"));
                None
            }
        },
        Some(other) => {
            problems.push(format!(
                "quantity must be a positive integer, got {}",
                kind(other)
            ));
            None
        }
        None => {
            problems.push("quantity is missing".to_owned());
            None
        }
    };
    match (product_id, quantity) {
        (Some(product_id), Some(quantity)) if problems.is_empty() => Ok(OrderItem {
            product_id,
            quantity,
        }),
        _ => Err(problems),
    }
}

/// A required, non-blank string field; records the problem otherwise.
fn non_empty_string(
    obj: &serde_json::Map<String, Value>,
    field: &str,
    problems: &mut Vec<String>,
) -> Option<String> {
    match obj.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => return Some(s.clone()),
        Some(Value::String(_)) => problems.push(format!("{field} must not be empty")),
        Some(other) => problems.push(format!("{field} must be a string, got {}", kind(other))),
        None => problems.push(format!("{field} is missing")),
    }
    None
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reject(body: &str) -> Rejection {
        parse_order(Some(body)).unwrap_err()
    }

    #[test]
    fn a_valid_order() {
        let o = parse_order(Some(r#"{"orderId":"ORD-1","userId":"u1","items":[{"productId":"p1","quantity":2}],"note":"x"}"#)).unwrap();
        assert_eq!(o.order_id.as_str(), "ORD-1");
        assert_eq!(
            o.items,
            vec![OrderItem {
                product_id: "p1".into(),
                quantity: 2
            }]
        );
        let document: Value = serde_json::from_str(o.document.get()).unwrap();
        assert_eq!(document["note"], "x");
    }

    #[test]
    fn the_fast_path_and_the_full_path_agree() {
        // Valid orders take the fast path; everything it turns away takes the full one. Both
        // must accept exactly the same bodies with the same fields.
        let bodies = [
            r#"{"orderId":"A","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            r#" {"orderId":"A\u0042","userId":"u","items":[{"productId":"p\n","quantity":3}],"x":[1]} "#,
            r#"{"orderId":"A","orderId":"B","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            r#"{"orderId":"A","userId":"u","items":[{"productId":"p","quantity":2.0}]}"#,
            r#"{"orderId":"A","userId":"u","items":[{"productId":"p","quantity":1,"quantity":0}]}"#,
            r#"{"orderId":"A","userId":" ","items":[{"productId":"p","quantity":1}]}"#,
            r#"{"orderId":"A","userId":"u","items":[{"productId":"","quantity":1}]}"#,
            r#"{"orderId":"A B","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            r#"{"orderId":"A","userId":"u","items":[]}"#,
            r#"{"orderId":"A","userId":"u","items":[{"productId":"p","quantity":18446744073709551615}]}"#,
            r#"[{"orderId":"A"}]"#,
        ];
        for body in bodies {
            let fast = fast_path(body);
            let full = serde_json::from_str::<Value>(body)
                .map_err(|_| ())
                .and_then(|v| validate(v).map_err(|_| ()));
            match (&fast, &full) {
                (Some(f), Ok(v)) => {
                    assert_eq!(
                        (&f.order_id, &f.user_id, &f.items),
                        (&v.order_id, &v.user_id, &v.items),
                        "{body}"
                    );
                    let (a, b): (Value, Value) = (
                        serde_json::from_str(f.document.get()).unwrap(),
                        serde_json::from_str(v.document.get()).unwrap(),
                    );
                    assert_eq!(a, b, "{body}");
                }
                (None, _) => {} // the full path decides
                (Some(_), Err(_)) => panic!("the fast path accepted what the rules refuse: {body}"),
            }
            assert_eq!(parse_order(Some(body)).is_ok(), full.is_ok(), "{body}");
        }
        assert!(
            fast_path(bodies[0]).is_some(),
            "the common case takes the fast path"
        );
    }

    #[test]
    fn malformed_json() {
        for body in ["{", "not json", "", "{\"orderId\": }"] {
            assert_eq!(reject(body).code, "MALFORMED_JSON", "{body:?}");
        }
        assert_eq!(parse_order(None).unwrap_err().code, "MALFORMED_JSON");
    }

    #[test]
    fn validation_lists_every_problem() {
        let r = reject(
            r#"{"orderId":"A1","items":[{"productId":"p","quantity":0},{"quantity":1.5},"x"]}"#,
        );
        assert_eq!(r.code, "VALIDATION_FAILED");
        assert_eq!(r.business_id.as_deref(), Some("A1"));
        for expected in [
            "userId is missing",
            "items[0].quantity must be a positive integer, got 0",
            "items[1].productId is missing",
            "items[1].quantity must be a positive integer, got 1.5",
            "items[2].item must be an object, got a string",
        ] {
            assert!(
                r.details.contains(expected),
                "{expected:?} not in {:?}",
                r.details
            );
        }
    }

    /// A body that breaks one rule, and what the rejection says.
    const ONE_RULE_BROKEN: &[(&str, &str)] = &[
        (r#"[]"#, "must be a JSON object"),
        (
            r#"{"orderId":7,"userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            "orderId must be a string",
        ),
        (
            r#"{"orderId":"","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            "orderId must not be empty",
        ),
        (
            r#"{"orderId":"a/b","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            "orderId contains '/'",
        ),
        (
            r#"{"orderId":"a b","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            "orderId contains ' '",
        ),
        (
            "{\"orderId\":\"a\\nb\",\"userId\":\"u\",\"items\":[{\"productId\":\"p\",\"quantity\":1}]}",
            "orderId contains the control character U+000A;",
        ),
        (
            r#"{"orderId":"café","userId":"u","items":[{"productId":"p","quantity":1}]}"#,
            "orderId contains 'é' (U+00E9);",
        ),
        (
            r#"{"orderId":"o","userId":" ","items":[{"productId":"p","quantity":1}]}"#,
            "userId must not be empty",
        ),
        (
            r#"{"orderId":"o","userId":"u","items":[]}"#,
            "items must not be empty",
        ),
        (
            r#"{"orderId":"o","userId":"u","items":{}}"#,
            "items must be an array",
        ),
        (
            r#"{"orderId":"o","userId":"u","items":[{"productId":"p","quantity":-1}]}"#,
            "quantity must be a positive integer",
        ),
        (
            r#"{"orderId":"o","userId":"u","items":[{"productId":"p","quantity":"2"}]}"#,
            "quantity must be a positive integer, got a string",
        ),
    ];

    #[test]
    fn each_rule_alone() {
        for (body, needle) in ONE_RULE_BROKEN {
            let r = reject(body);
            assert_eq!(r.code, "VALIDATION_FAILED", "{body}");
            assert!(
                r.details.contains(*needle),
                "{needle:?} not in {:?}",
                r.details
            );
        }
        let long = "x".repeat(MAX_ORDER_ID_LEN + 1);
        assert!(
            reject(&format!(
                r#"{{"orderId":"{long}","userId":"u","items":[{{"productId":"p","quantity":1}}]}}"#
            ))
            .details
            .contains("at most 128")
        );
    }
}
