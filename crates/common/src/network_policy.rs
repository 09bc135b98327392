//! The network policy Devin attaches to a session, as every backend reads it.
//!
//! It arrives in a queue entry's `spec.network_policy`; the sandbox backends
//! enforce or map it. Parsing is tolerant: an allow-list entry of a shape this
//! version does not know is kept as [`AllowRule::Unknown`] rather than failing
//! the whole entry.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `spec.network_policy`: with `enabled`, only `allow` may be reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    #[serde(default)]
    /// Whether the policy restricts egress at all.
    pub enabled: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    /// What the sandbox may reach when it does.
    pub allow: Vec<AllowRule>,
}

/// One entry of an allow list: `{hostname: "*.example.com"}`,
/// `{ipv4: "10.0.0.0/8"}` or `{ipv6: "..."}`. Any other shape is kept as
/// `Unknown` so a policy from a newer server never fails to parse; enforcers
/// must treat `Unknown` as "allows nothing".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowRule {
    /// A host name (with its subdomains as the server means them).
    Hostname(String),
    /// An IPv4 address or CIDR range.
    Ipv4(String),
    /// An IPv6 address or CIDR range.
    Ipv6(String),
    /// A rule this version does not know; kept verbatim.
    Unknown(serde_json::Value),
}

impl Serialize for AllowRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let value = match self {
            Self::Hostname(h) => serde_json::json!({ "hostname": h }),
            Self::Ipv4(a) => serde_json::json!({ "ipv4": a }),
            Self::Ipv6(a) => serde_json::json!({ "ipv6": a }),
            Self::Unknown(v) => v.clone(),
        };
        value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for AllowRule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let field = |name: &str| value.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        Ok(if let Some(h) = field("hostname") {
            Self::Hostname(h)
        } else if let Some(a) = field("ipv4") {
            Self::Ipv4(a)
        } else if let Some(a) = field("ipv6") {
            Self::Ipv6(a)
        } else {
            Self::Unknown(value)
        })
    }
}

/// `null` reads as the type's default, as a missing field does.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
