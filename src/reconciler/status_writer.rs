//! Writing the CR's status: only when it changes ([`super::status::next_status`]), with an Event on every
//! state change (published in the background, [`super::events`]). The `CredentialsValid` condition
//! ([`super::credentials_condition`]) goes with it, with an Event on every change of its reason.

use super::context::Context;
use super::credentials_condition;
use super::error::{api_err, ApiError};
use super::status::{self, Outcome};
use btp_api::{BtpOperator, BtpOperatorStatus, Reason, State};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;

/// The CR's status as this pass last wrote (or read) it.
pub struct StatusWriter<'a> {
    ctx: &'a Context,
    api: Api<BtpOperator>,
    cr: &'a BtpOperator,
    current: Option<BtpOperatorStatus>,
    /// The settings whose credentials check's verdict goes with each status this writer writes (None: the
    /// condition is left as it is).
    credentials: Option<&'a crate::config::Config>,
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

impl<'a> StatusWriter<'a> {
    /// A writer for `cr`, starting from the status it carries.
    pub fn new(ctx: &'a Context, cr: &'a BtpOperator) -> Self {
        Self {
            ctx,
            api: Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default()),
            cr,
            current: cr.status.clone(),
            credentials: None,
        }
    }

    /// Write the credentials check's verdict for `config` as the `CredentialsValid` condition with every
    /// status this writer writes ([`StatusWriter::write_credentials`] writes it alone). The verdict is taken
    /// as it is at each write, not when the pass began: one that came during the pass goes with the pass's
    /// status (on an install, in the same request as `Ready`) instead of bringing a write of its own.
    pub fn with_credentials(mut self, config: &'a crate::config::Config) -> Self {
        self.credentials = Some(config);
        self
    }

    /// The verdict to write now (None: the condition is left as it is).
    fn verdict(&self) -> Option<crate::credentials_check::Verdict> {
        self.credentials
            .and_then(|config| self.ctx.credentials_check().verdict(config))
    }

    /// Write the `CredentialsValid` condition if it changed (and the status exists).
    pub async fn write_credentials(&mut self) -> Result<(), ApiError> {
        let verdict = self.verdict();
        match credentials_condition::apply(self.current.as_ref(), verdict.as_ref(), &now_rfc3339()) {
            Some(next) => self.write(next, None, verdict.as_ref()).await,
            None => Ok(()),
        }
    }

    /// Report `outcome`: write the status if it differs, and publish an Event if the state changes.
    pub async fn set(&mut self, outcome: Outcome) -> Result<(), ApiError> {
        let now = now_rfc3339();
        let ready = status::next_status(self.current.as_ref(), &outcome, self.cr.meta().generation, &now);
        let base = ready.as_ref().or(self.current.as_ref());
        let verdict = self.verdict();
        let Some(next) = credentials_condition::apply(base, verdict.as_ref(), &now).or(ready) else {
            return Ok(());
        };
        self.write(next, Some(&outcome), verdict.as_ref()).await
    }

    /// Patch the status to `next`; Events for a new state (`outcome` says why) and a new credentials reason
    /// (`verdict`, the one `next` carries).
    async fn write(
        &mut self,
        next: BtpOperatorStatus,
        outcome: Option<&Outcome>,
        verdict: Option<&crate::credentials_check::Verdict>,
    ) -> Result<(), ApiError> {
        let patch = Patch::Merge(json!({ "status": next }));
        let name = self.cr.name_any();
        let patch_params = PatchParams::default();
        let written = super::cluster::retry::retrying(|| self.api.patch_status(&name, &patch_params, &patch))
            .await
            .map_err(api_err("writing the BtpOperator status"))?;
        // The next pass reads the CR as new as this write (docs/behaviour.md#the-read-path).
        if let Some(view) = self.ctx.view() {
            view.wrote_cr(&written);
        }
        let changed_state = self.current.as_ref().map(|s| s.state) != Some(next.state)
            && self
                .ctx
                .memory(|m| m.announce(&self.cr.uid().unwrap_or_default(), next.state));
        if let (true, Some(outcome)) = (changed_state, outcome) {
            let type_ = match next.state {
                State::Error | State::Warning => EventType::Warning,
                _ => EventType::Normal,
            };
            let event = Event {
                type_,
                reason: outcome.reason.as_str().into(),
                note: Some(format!("{}: {}", next.state.as_str(), outcome.message)),
                action: "Reconcile".into(),
                secondary: None,
            };
            self.ctx.publish(event, self.cr.object_ref(&()));
            tracing::info!(state = next.state.as_str(), reason = %outcome.reason, detail = %outcome.message, "BtpOperator state changed");
        }
        let credentials = credentials_condition::reason(Some(&next));
        if let (true, Some(verdict)) = (
            credentials != credentials_condition::reason(self.current.as_ref()),
            verdict,
        ) {
            let event = Event {
                type_: match verdict.status() {
                    btp_api::ConditionStatus::False => EventType::Warning,
                    _ => EventType::Normal,
                },
                reason: verdict.reason.as_str().into(),
                note: Some(format!("{}: {}", btp_api::CREDENTIALS_VALID, verdict.message)),
                action: "CheckCredentials".into(),
                secondary: None,
            };
            self.ctx.publish(event, self.cr.object_ref(&()));
            tracing::info!(reason = %verdict.reason, "BtpOperator CredentialsValid changed");
        }
        self.ctx.metrics.cr_state(Some(next.state.as_str()));
        self.current = Some(next);
        Ok(())
    }

    /// The state now.
    pub fn state(&self) -> Option<State> {
        status::current_state(self.current.as_ref())
    }

    /// The `Ready` condition's reason now (None when there is none, or it is not one of ours).
    pub fn reason(&self) -> Option<Reason> {
        self.current
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == status::READY))
            .and_then(|c| c.reason.parse().ok())
    }
}
