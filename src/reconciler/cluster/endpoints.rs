//! The API server's endpoint ports, which the network policies allow besides 443
//! (docs/behaviour.md#network-policies): from the view's store of the `default/kubernetes` EndpointSlices
//! (no request), else listed here.

use super::api::Cluster;
use super::retry::retrying;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::network_policies::{api_server_ports, API_SERVER_SLICES_NAMESPACE, API_SERVER_SLICES_SELECTOR};
use crate::reconciler::view::read_through;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;

impl Cluster<'_> {
    /// The TCP ports of the API server's endpoints other than 443. A cluster that does not serve
    /// EndpointSlices to us (404, or 403 from an RBAC without them) has none to add: the shipped rules
    /// stay, and the reason is logged.
    pub(super) async fn api_server_ports(&self) -> Result<BTreeSet<u16>, ApiError> {
        let api = Api::<EndpointSlice>::namespaced(self.client(), API_SERVER_SLICES_NAMESPACE);
        let params = ListParams::default().labels(API_SERVER_SLICES_SELECTOR);
        let list = async {
            match retrying(|| api.list(&params)).await {
                Ok(list) => Ok(Some(list.items)),
                Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
                    tracing::warn!(code = e.code, reason = %e.reason,
                        "cannot list the default/kubernetes EndpointSlices; the network policies allow the API server on 443 only");
                    Ok(None)
                }
                Err(e) => Err(api_err("listing the default/kubernetes EndpointSlices")(e)),
            }
        };
        let view = self.ctx.view();
        let slices = read_through(view.as_deref(), |v| v.api_server_slices(), list, |_, _| {}).await?;
        Ok(api_server_ports(&slices.unwrap_or_default()))
    }
}
