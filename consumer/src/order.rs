//! Orders: parsing and validation of one record's body (SPEC §3 step 2).
//!
//! A body that is not JSON is `MALFORMED_JSON`; JSON that is not a valid order is
//! `VALIDATION_FAILED`, with every problem listed so a human can fix the producer.

use resq::reason::{MALFORMED_JSON, VALIDATION_FAILED};
use serde::Serialize;
use serde_json::Value;

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
            return Err(format!(
                "orderId contains {c:?}; only printable ASCII without spaces, '/' or '\\' is allowed"
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
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The business id.
    pub order_id: OrderId,
    /// Who ordered.
    pub user_id: String,
    /// What was ordered; never empty.
    pub items: Vec<OrderItem>,
    /// The whole JSON document as sent, other fields included.
    #[serde(skip)]
    pub document: Value,
}

/// Why a body is not an order: a permanent failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {details}")]
pub struct Rejection {
    /// `MALFORMED_JSON` or `VALIDATION_FAILED`.
    pub code: &'static str,
    /// What is wrong, in words.
    pub details: String,
    /// The `orderId` when one could be read, for log correlation.
    pub order_id: Option<String>,
}

/// Parses and validates one body.
pub fn parse_order(body: Option<&str>) -> Result<Order, Rejection> {
    let body = body.ok_or_else(|| Rejection {
        code: MALFORMED_JSON,
        details: "the message has no body".into(),
        order_id: None,
    })?;
    let document: Value = serde_json::from_str(body).map_err(|e| Rejection {
        code: MALFORMED_JSON,
        details: format!("body is not JSON: {e}"),
        order_id: None,
    })?;
    validate(document)
}

fn validate(document: Value) -> Result<Order, Rejection> {
    let invalid = |problems: Vec<String>, order_id: Option<String>| Rejection {
        code: VALIDATION_FAILED,
        details: problems.join("; "),
        order_id,
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
    match (order_id, user_id, problems.is_empty()) {
        (Some(order_id), Some(user_id), true) => Ok(Order {
            order_id,
            user_id,
            items,
            document,
        }),
        _ => Err(invalid(problems, raw_id)),
    }
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
        assert_eq!(o.document["note"], "x");
    }

    #[test]
    fn malformed_json() {
        for body in ["{", "not json", "", "{\"orderId\": }"] {
            assert_eq!(reject(body).code, MALFORMED_JSON, "{body:?}");
        }
        assert_eq!(parse_order(None).unwrap_err().code, MALFORMED_JSON);
    }

    #[test]
    fn validation_lists_every_problem() {
        let r = reject(
            r#"{"orderId":"A1","items":[{"productId":"p","quantity":0},{"quantity":1.5},"x"]}"#,
        );
        assert_eq!(r.code, VALIDATION_FAILED);
        assert_eq!(r.order_id.as_deref(), Some("A1"));
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

    #[test]
    fn each_rule_alone() {
        for (body, needle) in [
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
        ] {
            let r = reject(body);
            assert_eq!(r.code, VALIDATION_FAILED, "{body}");
            assert!(
                r.details.contains(needle),
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
