//! Writing the CR's status: only when it changes ([`super::status::next_status`]), with an Event on every
//! state change (published in the background, [`super::events`]).

use super::context::Context;
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
        }
    }

    /// Report `outcome`: write the status if it differs, and publish an Event if the state changes.
    pub async fn set(&mut self, outcome: Outcome) -> Result<(), ApiError> {
        let Some(next) = status::next_status(
            self.current.as_ref(),
            &outcome,
            self.cr.meta().generation,
            &now_rfc3339(),
        ) else {
            return Ok(());
        };
        let patch = Patch::Merge(json!({ "status": next }));
        let name = self.cr.name_any();
        let patch_params = PatchParams::default();
        super::cluster::retry::retrying(|| self.api.patch_status(&name, &patch_params, &patch))
            .await
            .map_err(api_err("writing the BtpOperator status"))?;
        let changed_state = self.current.as_ref().map(|s| s.state) != Some(next.state);
        if changed_state {
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
