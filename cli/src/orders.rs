//! Orders to send: read from a file or generated.

use rand::Rng;
use serde_json::{Value, json};

use crate::CliError;

/// What a generated order is meant to do in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A valid order.
    Valid,
    /// Not JSON.
    Malformed,
    /// JSON, but not a valid order.
    Invalid,
}

/// One message body with its intended kind and order id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The order id (also for malformed bodies, where it cannot be parsed back).
    pub order_id: String,
    /// The body.
    pub body: String,
    /// Its kind.
    pub kind: Kind,
    /// Its tenant: the `MessageGroupId` it is sent with (a fair queue's; a FIFO queue's group
    /// is the order's own when there is none).
    pub group: Option<String>,
}

/// Where `resq send` takes its orders from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A file: a JSON array, or one document per line (see [`from_file`]).
    File(std::path::PathBuf),
    /// Generated (see [`generate`]).
    Generated {
        /// Prefix of the order ids.
        prefix: String,
        /// How many.
        count: usize,
        /// Percentage not JSON.
        malformed_pct: f64,
        /// Percentage invalid.
        invalid_pct: f64,
    },
}

impl Source {
    /// The orders: read from the file, or generated with `rng`.
    pub fn load(&self, rng: &mut impl Rng) -> Result<Vec<Outgoing>, CliError> {
        match self {
            Self::File(path) => from_file(path),
            Self::Generated {
                prefix,
                count,
                malformed_pct,
                invalid_pct,
            } => Ok(generate(prefix, *count, *malformed_pct, *invalid_pct, rng)),
        }
    }
}

/// Reads orders from a file: a JSON array of orders, or one JSON document per line. Lines
/// that are not JSON are sent as they are (to exercise the DLQ on purpose).
pub fn from_file(path: &std::path::Path) -> Result<Vec<Outgoing>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::UnreadableFile {
        path: path.to_owned(),
        source,
    })?;
    let docs: Vec<String> = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(items)) => items.into_iter().map(|v| v.to_string()).collect(),
        Ok(single) => vec![single.to_string()],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect(),
    };
    if docs.is_empty() {
        return Err(CliError::NoOrders {
            path: path.to_owned(),
        });
    }
    Ok(docs
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let parsed = serde_json::from_str::<Value>(&body).ok();
            let order_id = parsed
                .as_ref()
                .and_then(|v| v["orderId"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("line-{}", i + 1));
            let kind = match parsed {
                None => Kind::Malformed,
                Some(v)
                    if v["orderId"].is_string()
                        && v["userId"].is_string()
                        && v["items"].as_array().is_some_and(|a| !a.is_empty()) =>
                {
                    Kind::Valid
                }
                Some(_) => Kind::Invalid,
            };
            Outgoing {
                order_id,
                body,
                kind,
                group: None,
            }
        })
        .collect())
}

/// A valid order body.
pub fn valid(order_id: &str, rng: &mut impl Rng) -> String {
    let items: Vec<Value> = (0..rng.random_range(1..=3))
        .map(|_| json!({"productId": format!("p-{}", rng.random_range(1..=500)), "quantity": rng.random_range(1..=5)}))
        .collect();
    json!({"orderId": order_id, "userId": format!("u-{}", rng.random_range(1..=1000)), "items": items, "currency": "EUR"}).to_string()
}

/// The noisy tenant of [`with_tenants`].
pub const NOISY_TENANT: &str = "tenant-noisy";

/// Spreads `orders` over tenants as a fair queue sees them: a third under one noisy tenant
/// ([`NOISY_TENANT`]), the rest over ten quiet ones (`tenant-01` … `tenant-10`), at random.
pub fn with_tenants(mut orders: Vec<Outgoing>, rng: &mut impl Rng) -> Vec<Outgoing> {
    for o in &mut orders {
        o.group = Some(match rng.random_range(0..3) {
            0 => NOISY_TENANT.to_owned(),
            _ => format!("tenant-{:02}", rng.random_range(1..=10)),
        });
    }
    orders
}

/// A percentage flag (`--malformed-pct 10`): a number from 0 to 100.
pub fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("\"{s}\" is not a percentage from 0 to 100")),
    }
}

/// Generates `count` orders `{prefix}{n}`: `malformed_pct` % not JSON, `invalid_pct` %
/// invalid (each share rounded to whole orders: 10 % of 20 is exactly 2), the rest valid, in
/// random places.
pub fn generate(
    prefix: &str,
    count: usize,
    malformed_pct: f64,
    invalid_pct: f64,
    rng: &mut impl Rng,
) -> Vec<Outgoing> {
    use rand::seq::SliceRandom;
    let share = |pct: f64| ((count as f64 * pct / 100.0).round() as usize).min(count);
    let malformed = share(malformed_pct);
    let invalid = share(invalid_pct).min(count - malformed);
    let mut kinds: Vec<Kind> = std::iter::repeat_n(Kind::Malformed, malformed)
        .chain(std::iter::repeat_n(Kind::Invalid, invalid))
        .chain(std::iter::repeat_n(
            Kind::Valid,
            count - malformed - invalid,
        ))
        .collect();
    kinds.shuffle(rng);
    kinds
        .into_iter()
        .enumerate()
        .map(|(n, kind)| {
            let order_id = format!("{prefix}{n:06}");
            if kind == Kind::Malformed {
                Outgoing {
                    body: format!("{{\"orderId\":\"{order_id}\",\"items\":[{{"),
                    order_id,
                    kind: Kind::Malformed,
                    group: None,
                }
            } else if kind == Kind::Invalid {
                Outgoing {
                    body: json!({"orderId": order_id, "userId": "u-1", "items": []}).to_string(),
                    order_id,
                    kind: Kind::Invalid,
                    group: None,
                }
            } else {
                Outgoing {
                    body: valid(&order_id, rng),
                    order_id,
                    kind: Kind::Valid,
                    group: None,
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn a_third_of_the_orders_are_the_noisy_tenants_and_the_rest_spread_over_ten() {
        let mut rng = StdRng::seed_from_u64(5);
        let orders = with_tenants(generate("o-", 3000, 0.0, 0.0, &mut rng), &mut rng);
        let groups: Vec<&str> = orders.iter().filter_map(|o| o.group.as_deref()).collect();
        assert_eq!(groups.len(), orders.len(), "every order has a tenant");
        let noisy = groups.iter().filter(|g| **g == NOISY_TENANT).count();
        assert!((900..1100).contains(&noisy), "{noisy} of 3,000");
        let quiet: std::collections::BTreeSet<&&str> =
            groups.iter().filter(|g| **g != NOISY_TENANT).collect();
        assert_eq!(quiet.len(), 10, "{quiet:?}");
    }

    #[test]
    fn generated_orders_match_their_kind() {
        let orders = generate("o-", 400, 10.0, 10.0, &mut StdRng::seed_from_u64(3));
        for o in &orders {
            let verdict = resq_consumer::order::parse_order(Some(&o.body));
            match o.kind {
                Kind::Valid => assert_eq!(verdict.unwrap().order_id.as_str(), o.order_id),
                Kind::Malformed => assert_eq!(verdict.unwrap_err().code, "MALFORMED_JSON"),
                Kind::Invalid => assert_eq!(verdict.unwrap_err().code, "VALIDATION_FAILED"),
            }
        }
        let count = |k: Kind| orders.iter().filter(|o| o.kind == k).count();
        assert_eq!(count(Kind::Malformed), 40);
        assert_eq!(count(Kind::Invalid), 40);
        assert_eq!(count(Kind::Valid), 320);
        // the shares are exact at small counts too, and never more than the count
        let few = generate("o-", 20, 10.0, 0.0, &mut StdRng::seed_from_u64(4));
        assert_eq!(few.iter().filter(|o| o.kind == Kind::Malformed).count(), 2);
        let all = generate("o-", 3, 80.0, 80.0, &mut StdRng::seed_from_u64(5));
        assert_eq!(all.iter().filter(|o| o.kind == Kind::Valid).count(), 0);
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn files_of_arrays_or_lines() {
        let dir = std::env::temp_dir().join(format!("resq-orders-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let array = dir.join("a.json");
        std::fs::write(&array, r#"[{"orderId":"A","userId":"u","items":[{"productId":"p","quantity":1}]},{"orderId":"B"}]"#).unwrap();
        let got = from_file(&array).unwrap();
        assert_eq!(
            got.iter()
                .map(|o| (o.order_id.as_str(), o.kind))
                .collect::<Vec<_>>(),
            vec![("A", Kind::Valid), ("B", Kind::Invalid)]
        );
        let lines = dir.join("b.jsonl");
        std::fs::write(&lines, "{\"orderId\":\"C\",\"userId\":\"u\",\"items\":[{\"productId\":\"p\",\"quantity\":1}]}\nnot json\n\n").unwrap();
        let got = from_file(&lines).unwrap();
        assert_eq!(
            got.iter()
                .map(|o| (o.order_id.as_str(), o.kind))
                .collect::<Vec<_>>(),
            vec![("C", Kind::Valid), ("line-2", Kind::Malformed)]
        );
        let missing = dir.join("missing.json");
        assert!(matches!(
            from_file(&missing),
            Err(CliError::UnreadableFile { path, source }) if path == missing && source.kind() == std::io::ErrorKind::NotFound
        ));
        let blank = dir.join("blank.jsonl");
        std::fs::write(&blank, "\n  \n").unwrap();
        assert!(matches!(
            from_file(&blank),
            Err(CliError::NoOrders { path }) if path == blank
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
