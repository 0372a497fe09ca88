//! [`PolicyName`]: the identifier that ties a `RateLimit` member to its `RateLimit-Policy` member.

use std::fmt;
use std::sync::Arc;

use super::error::FieldError;
use super::structured::{Bare, Item};

/// The name of a quota policy, written as a structured-field String (`"default"`).
///
/// Printable ASCII only; cheap to clone. Stacked rate limits need distinct names, so that a
/// client can tell their members apart.
///
/// ```
/// use flowguard::headers::{FieldError, PolicyName};
///
/// assert_eq!(PolicyName::default().as_str(), "default");
/// assert_eq!(PolicyName::new("per-key")?.as_str(), "per-key");
/// assert_eq!(PolicyName::new("naïve"), Err(FieldError::InvalidPolicyName));
/// # Ok::<(), FieldError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PolicyName(Arc<str>);

impl PolicyName {
    /// A policy name; [`FieldError::InvalidPolicyName`] unless every character is printable
    /// ASCII (space to `~`).
    pub fn new(name: impl Into<String>) -> Result<PolicyName, FieldError> {
        let name = name.into();
        if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(FieldError::InvalidPolicyName);
        }
        Ok(PolicyName(name.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name a list member of `field` carries: a String as the draft requires, or a Token,
    /// as some servers send.
    pub(super) fn of_member(field: &'static str, item: &Item) -> Result<PolicyName, FieldError> {
        match &item.value {
            Bare::String(name) | Bare::Token(name) => Ok(PolicyName(Arc::from(name.as_str()))),
            _ => Err(FieldError::NotAPolicyName { field }),
        }
    }
}

/// `"default"`, the name the draft's examples use for a server's only policy.
impl Default for PolicyName {
    fn default() -> Self {
        PolicyName(Arc::from("default"))
    }
}

impl fmt::Debug for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
