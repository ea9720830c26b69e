//! Which admission endpoint a request came to: what the handlers dispatch on and the metrics label.

/// Which endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    /// `/validate`.
    Validate,
    /// `/mutate`.
    Mutate,
}

impl Webhook {
    /// Label value used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
        }
    }
}
