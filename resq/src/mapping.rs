//! The consumer's event source mapping (Lambda's SQS poller in front of it), as the redriver's
//! consumer breaker and an operator's `resq consumer pause` see it: its state, and a switch.
//! The port ([`EventSourceMappings`]); its Lambda adapter is the redriver's
//! (`resq_redriver::ports::LambdaMappings`), so that the consumer carries no Lambda client.

use std::future::Future;

use crate::error::AwsError;

/// What the port needs on Lambda: read the one mapping and switch it (the template scopes both
/// to the consumer's mapping).
pub const PERMISSIONS: &[crate::iam::Permission] = &[
    crate::iam::Permission::new("lambda:GetEventSourceMapping", "ConsumerEventSourceMapping"),
    crate::iam::Permission::new(
        "lambda:UpdateEventSourceMapping",
        "ConsumerEventSourceMapping",
    ),
];

/// A mapping's state, as Lambda reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingState {
    /// Polling.
    Enabled,
    /// Asked to poll; not yet.
    Enabling,
    /// Not polling.
    Disabled,
    /// Asked to stop; not yet.
    Disabling,
    /// Creating, updating, deleting, or a state this version does not know.
    Other(String),
}

impl MappingState {
    /// Reads Lambda's word for it.
    pub fn parse(s: &str) -> Self {
        match s {
            "Enabled" => Self::Enabled,
            "Enabling" => Self::Enabling,
            "Disabled" => Self::Disabled,
            "Disabling" => Self::Disabling,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether it is (or is becoming) on: `Some(true)` enabled or enabling, `Some(false)`
    /// disabled or disabling, `None` in any other state (a switch now would be refused).
    pub fn is_on(&self) -> Option<bool> {
        match self {
            Self::Enabled | Self::Enabling => Some(true),
            Self::Disabled | Self::Disabling => Some(false),
            Self::Other(_) => None,
        }
    }

    /// Lambda's word for it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Enabled => "Enabled",
            Self::Enabling => "Enabling",
            Self::Disabled => "Disabled",
            Self::Disabling => "Disabling",
            Self::Other(s) => s,
        }
    }
}

/// One event source mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Its UUID.
    pub uuid: String,
    /// Its state.
    pub state: MappingState,
    /// The queue it polls.
    pub event_source_arn: Option<String>,
    /// The function it invokes.
    pub function_arn: Option<String>,
}

/// Event source mappings: read one, switch one.
pub trait EventSourceMappings: Send + Sync {
    /// The mapping `uuid`.
    fn get(&self, uuid: &str) -> impl Future<Output = Result<Mapping, AwsError>> + Send;

    /// Enables or disables the mapping `uuid`; what Lambda answered.
    fn set_enabled(
        &self,
        uuid: &str,
        enabled: bool,
    ) -> impl Future<Output = Result<Mapping, AwsError>> + Send;
}

impl<T: EventSourceMappings> EventSourceMappings for &T {
    fn get(&self, uuid: &str) -> impl Future<Output = Result<Mapping, AwsError>> + Send {
        (**self).get(uuid)
    }

    fn set_enabled(
        &self,
        uuid: &str,
        enabled: bool,
    ) -> impl Future<Output = Result<Mapping, AwsError>> + Send {
        (**self).set_enabled(uuid, enabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_say_whether_the_mapping_is_on() {
        for (word, on) in [
            ("Enabled", Some(true)),
            ("Enabling", Some(true)),
            ("Disabled", Some(false)),
            ("Disabling", Some(false)),
            ("Updating", None),
            ("Creating", None),
        ] {
            let s = MappingState::parse(word);
            assert_eq!((s.is_on(), s.as_str()), (on, word));
        }
    }
}
