//! The correlation id of a message's log lines (docs/design.md, "Logs"): the business id,
//! logged as `correlation_id` (Powertools Logger's key) and under the message type's own key
//! (`order_id` for orders), read from the body's top-level field (`orderId`) without parsing
//! the message, so that a line about any message (a replay, an archive) can name it whether or
//! not the body is valid.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::config::{ConfigError, Vars};

/// The key every line about a message carries its business id under, as Powertools Logger
/// does (`set_correlation_id`): a Powertools query `filter correlation_id = "…"` finds it.
pub(crate) const CORRELATION_ID: &str = "correlation_id";

/// Powertools Logger's standard keys, which resq writes on every JSON line itself (a field of
/// the same name on an event or a span is not written, as Powertools ignores such keys; the
/// event's `message` is the line's), and `correlation_id`, which resq's own spans and events
/// carry. A message type's correlation key cannot be one of them.
pub const RESERVED_KEYS: [&str; 11] = [
    "timestamp",
    "level",
    "service",
    "cold_start",
    "function_name",
    "function_memory_size",
    "function_arn",
    "function_request_id",
    "xray_trace_id",
    "message",
    CORRELATION_ID,
];

/// Keys resq writes on its lines about a message, beside [`RESERVED_KEYS`]: a message type's
/// own correlation key cannot be one of them.
pub const MESSAGE_KEYS: [&str; 8] = [
    "message_id",
    "new_message_id",
    "error_code",
    "error_details",
    "failure_class",
    "redrive_count",
    "reason",
    "key",
];

/// Where a message type's business id is found and logged: its own log key (`order_id`) and
/// the body's top-level field that holds it (`orderId`). One rule for both functions: the
/// consumer reads it from a body it could not parse, the redriver from every DLQ message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorrelationKey {
    log_key: Cow<'static, str>,
    body_field: Cow<'static, str>,
}

impl CorrelationKey {
    /// Orders: logged as `order_id`, read from `orderId`.
    pub const ORDERS: CorrelationKey = CorrelationKey::new("order_id", "orderId");

    /// A key logged as `log_key` (snake_case), read from the body's field `body_field`.
    pub const fn new(log_key: &'static str, body_field: &'static str) -> Self {
        Self {
            log_key: Cow::Borrowed(log_key),
            body_field: Cow::Borrowed(body_field),
        }
    }

    /// The message type's own log key (`order_id`), written beside `correlation_id`.
    pub(crate) fn log_key(&self) -> &str {
        &self.log_key
    }

    /// The body's top-level field holding the business id (`orderId`).
    pub fn body_field(&self) -> &str {
        &self.body_field
    }

    /// The business id in `body`: its top-level string field [`Self::body_field`] (see
    /// [`field`]).
    pub fn read(&self, body: &str) -> Option<String> {
        field(body, &self.body_field)
    }

    /// `default` as `RESQ_CORRELATION_KEY` (the log key) and `RESQ_CORRELATION_FIELD` (the
    /// body's field) override it. The key alone also sets the field, to its camelCase
    /// (`payment_id` reads `paymentId`). A log key must be snake_case (`[a-z][a-z0-9_]*`, at
    /// most 64 characters) and none of the keys resq writes itself.
    pub fn from_vars(
        default: Self,
        vars: &Vars<impl Fn(&str) -> Option<String>>,
    ) -> Result<Self, ConfigError> {
        let key = vars
            .get("RESQ_CORRELATION_KEY")
            .map(|k| k.trim().to_owned());
        let field = vars
            .get("RESQ_CORRELATION_FIELD")
            .map(|f| f.trim().to_owned());
        let out = match (key, field) {
            (None, None) => default,
            (Some(key), field) => Self {
                body_field: Cow::Owned(field.unwrap_or_else(|| camel_case(&key))),
                log_key: Cow::Owned(key),
            },
            (None, Some(field)) => Self {
                body_field: Cow::Owned(field),
                ..default
            },
        };
        if let Some(expected) = out.refusal() {
            return Err(ConfigError::Invalid {
                var: "RESQ_CORRELATION_KEY",
                value: out.log_key.into_owned(),
                expected,
            });
        }
        if out.body_field.is_empty() || out.body_field.chars().count() > 128 {
            return Err(ConfigError::Invalid {
                var: "RESQ_CORRELATION_FIELD",
                value: out.body_field.into_owned(),
                expected: "the name of the body's top-level field holding the business id (1 to 128 characters)".into(),
            });
        }
        Ok(out)
    }

    /// Why the log key cannot be used, if it cannot.
    pub(crate) fn refusal(&self) -> Option<String> {
        let k = self.log_key.as_ref();
        let snake = k.len() <= 64
            && k.starts_with(|c: char| c.is_ascii_lowercase())
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !snake {
            return Some("a snake_case log key: a lowercase letter, then lowercase letters, digits or _ (at most 64), e.g. payment_id".into());
        }
        let own = RESERVED_KEYS.iter().chain(&MESSAGE_KEYS);
        own.clone().any(|o| *o == k).then(|| {
            format!(
                "a log key of the message type's own: {k} is one resq writes itself ({})",
                own.copied().collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// `snake_case` as `camelCase`: `payment_id` → `paymentId`.
pub(crate) fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The body's top-level string field `name`, when the body is a JSON object that has one;
/// `None` for anything else (not JSON, not an object, no such field, one that is not a
/// string, or given twice). Nothing but that field is kept: the rest of the body is skipped,
/// not built.
pub fn field(body: &str, name: &str) -> Option<String> {
    let mut de = serde_json::Deserializer::from_str(body);
    let found = FieldOf(name).deserialize(&mut de).ok()?;
    de.end().ok()?;
    found
}

/// What [`field`] reads a body as: the field `.0`'s string value.
struct FieldOf<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for FieldOf<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        // a map only: a struct would also read `["o-1"]` as its first field
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found: Option<Option<String>> = None;
        while let Some(is) = map.next_key_seed(IsField(self.0))? {
            if !is {
                map.next_value::<IgnoredAny>()?;
            } else if found.is_some() {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    self.0
                )));
            } else {
                found = Some(map.next_value::<StringOrNot>()?.0);
            }
        }
        Ok(found.flatten())
    }
}

/// A key, compared with the field's name without keeping it.
struct IsField<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for IsField<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for IsField<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// A value: the string it is, or `None` for any other JSON value (skipped).
struct StringOrNot(Option<String>);

impl<'de> serde::Deserialize<'de> for StringOrNot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Value;
        impl<'de> Visitor<'de> for Value {
            type Value = StringOrNot;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StringOrNot, E> {
                Ok(StringOrNot(Some(s.to_owned())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<StringOrNot, E> {
                Ok(StringOrNot(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<StringOrNot, E> {
                Ok(StringOrNot(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<StringOrNot, E> {
                Ok(StringOrNot(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<StringOrNot, E> {
                Ok(StringOrNot(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<StringOrNot, E> {
                Ok(StringOrNot(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<StringOrNot, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StringOrNot(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StringOrNot, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StringOrNot(None))
            }
        }
        d.deserialize_any(Value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_id_of_a_json_object() {
        assert_eq!(
            CorrelationKey::ORDERS.read(
                r#"{"orderId":"ORD-1001","userId":"u1","items":[{"productId":"p","quantity":1}]}"#
            ),
            Some("ORD-1001".into())
        );
        // anywhere among the top-level fields, escaped or not, around whitespace
        assert_eq!(
            CorrelationKey::ORDERS.read(
                " { \"items\": [{\"orderId\": \"inner\"}], \"order\\u0049d\" : \"o\\\"2\" } "
            ),
            Some("o\"2".into())
        );
        assert_eq!(
            CorrelationKey::ORDERS.read(r#"{"orderId":""}"#),
            Some(String::new())
        );
    }

    #[test]
    fn any_field_by_name() {
        let body = r#"{"paymentId":"p-7","orderId":"o-1"}"#;
        assert_eq!(field(body, "paymentId"), Some("p-7".into()));
        assert_eq!(
            CorrelationKey::new("payment_id", "paymentId").read(body),
            Some("p-7".into())
        );
        assert_eq!(field(body, "payment_id"), None);
        assert_eq!(
            field(r#"{"paymentId":"a","paymentId":"b"}"#, "paymentId"),
            None
        );
    }

    #[test]
    fn the_key_alone_names_its_camel_case_field() {
        assert_eq!(camel_case("payment_id"), "paymentId");
        assert_eq!(camel_case("order_line_id"), "orderLineId");
        assert_eq!(camel_case("id"), "id");
        assert_eq!(camel_case("_x"), "x");
        let vars = |k: &'static str, v: &'static str| {
            crate::config::Vars(move |name: &str| (name == k).then(|| v.to_owned()))
        };
        let key = CorrelationKey::from_vars(
            CorrelationKey::ORDERS,
            &vars("RESQ_CORRELATION_KEY", "payment_id"),
        )
        .unwrap();
        assert_eq!(
            (key.log_key(), key.body_field()),
            ("payment_id", "paymentId")
        );
        let key = CorrelationKey::from_vars(
            CorrelationKey::ORDERS,
            &vars("RESQ_CORRELATION_FIELD", "order_ref"),
        )
        .unwrap();
        assert_eq!((key.log_key(), key.body_field()), ("order_id", "order_ref"));
        let none = crate::config::Vars(|_: &str| None);
        assert_eq!(
            CorrelationKey::from_vars(CorrelationKey::ORDERS, &none).unwrap(),
            CorrelationKey::ORDERS
        );
        for bad in ["Payment_id", "payment-id", "9id", "message_id", "level"] {
            assert!(
                CorrelationKey::from_vars(
                    CorrelationKey::ORDERS,
                    &vars("RESQ_CORRELATION_KEY", bad)
                )
                .is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn anything_else_has_none() {
        for body in [
            "",
            "not json",
            "{broken",
            r#"{"orderId":"o-1""#,
            r#"{"orderId":"o-1"} trailing"#,
            r#"["o-1"]"#,
            r#""o-1""#,
            "null",
            "7",
            r#"{}"#,
            r#"{"orderid":"o-1"}"#,
            r#"{"order":{"orderId":"o-1"}}"#,
            r#"{"orderId":7}"#,
            r#"{"orderId":null}"#,
            r#"{"orderId":["o-1"]}"#,
            r#"{"orderId":{"id":"o-1"}}"#,
            r#"{"orderId":"o-1","orderId":"o-2"}"#,
        ] {
            assert_eq!(CorrelationKey::ORDERS.read(body), None, "{body}");
        }
    }

    /// A JSON value, as text.
    fn value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            "\\PC{0,8}".prop_map(|s| serde_json::Value::String(s).to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::Value::from(f).to_string()),
            Just("null".to_owned()),
            any::<bool>().prop_map(|b| b.to_string()),
            proptest::collection::vec("\\PC{0,4}", 0..3)
                .prop_map(|v| serde_json::Value::from(v).to_string()),
            "\\PC{0,4}".prop_map(|s| serde_json::json!({"orderId": s}).to_string()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// On any object (keys may repeat) it agrees with reading the whole body as a JSON
        /// value, but for a repeated `orderId` (none, where a full parse keeps the last).
        #[test]
        fn agrees_with_a_full_parse(
            fields in proptest::collection::vec(
                (proptest::prop_oneof![
                    proptest::strategy::Just("orderId".to_owned()),
                    proptest::strategy::Just("orderid".to_owned()),
                    proptest::strategy::Just("items".to_owned()),
                    "\\PC{0,6}",
                ], value()),
                0..5,
            ),
        ) {
            let body = format!(
                "{{{}}}",
                fields
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let full: serde_json::Value = serde_json::from_str(&body).unwrap();
            let expected = full["orderId"].as_str().map(str::to_owned);
            let given = fields.iter().filter(|(k, _)| k == "orderId").count();
            match given {
                0 | 1 => proptest::prop_assert_eq!(CorrelationKey::ORDERS.read(&body), expected),
                _ => proptest::prop_assert_eq!(CorrelationKey::ORDERS.read(&body), None),
            }
        }

        /// Never panics, whatever the text.
        #[test]
        fn any_text_is_read_without_panicking(body in "\\PC{0,64}") {
            let _ = CorrelationKey::ORDERS.read(&body);
        }
    }
}
