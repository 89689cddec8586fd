//! The correlation id of a message's log lines (docs/design.md, "Logs"): the order's
//! `orderId`, read from the body without parsing the order, so that a line about any message
//! (a replay, an archive) can name it whether or not the body is a valid order.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The body's top-level string field `orderId`, when the body is a JSON object that has one;
/// `None` for anything else (not JSON, not an object, no `orderId`, one that is not a string,
/// or given twice). Nothing but that field is kept: the rest of the body is skipped, not built.
pub fn order_id(body: &str) -> Option<String> {
    serde_json::from_str::<OrderIdOf>(body).ok()?.0
}

/// What [`order_id`] reads a body as.
struct OrderIdOf(Option<String>);

impl<'de> serde::Deserialize<'de> for OrderIdOf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // a map only: a struct would also read `["o-1"]` as its first field
        d.deserialize_map(Fields)
    }
}

struct Fields;

impl<'de> Visitor<'de> for Fields {
    type Value = OrderIdOf;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderIdOf, A::Error> {
        let mut found: Option<Option<String>> = None;
        while let Some(IsOrderId(is)) = map.next_key()? {
            if !is {
                map.next_value::<IgnoredAny>()?;
            } else if found.is_some() {
                return Err(de::Error::duplicate_field("orderId"));
            } else {
                found = Some(map.next_value::<StringOrNot>()?.0);
            }
        }
        Ok(OrderIdOf(found.flatten()))
    }
}

/// A key, compared with `orderId` without keeping it.
struct IsOrderId(bool);

impl<'de> serde::Deserialize<'de> for IsOrderId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = IsOrderId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<IsOrderId, E> {
                Ok(IsOrderId(key == "orderId"))
            }
        }
        d.deserialize_str(Key)
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
            order_id(
                r#"{"orderId":"ORD-1001","userId":"u1","items":[{"productId":"p","quantity":1}]}"#
            ),
            Some("ORD-1001".into())
        );
        // anywhere among the top-level fields, escaped or not, around whitespace
        assert_eq!(
            order_id(" { \"items\": [{\"orderId\": \"inner\"}], \"order\\u0049d\" : \"o\\\"2\" } "),
            Some("o\"2".into())
        );
        assert_eq!(order_id(r#"{"orderId":""}"#), Some(String::new()));
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
            assert_eq!(order_id(body), None, "{body}");
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
                0 | 1 => proptest::prop_assert_eq!(order_id(&body), expected),
                _ => proptest::prop_assert_eq!(order_id(&body), None),
            }
        }

        /// Never panics, whatever the text.
        #[test]
        fn any_text_is_read_without_panicking(body in "\\PC{0,64}") {
            let _ = order_id(&body);
        }
    }
}
