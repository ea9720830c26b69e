//! Verb handlers, one module per verb: `read` (get, list), `create`, `update` (update, patch, apply),
//! `delete` (delete, deletecollection, namespaces, garbage collection), `scale`; the write helpers they
//! share live in `shared`.

use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};
use axum::response::Response;

mod create;
mod delete;
mod read;
mod scale;
mod shared;
mod update;

pub(crate) use delete::bootstrap_namespace;

pub(crate) async fn handle(ctx: &mut Ctx, verb: &str) -> ApiResult<Response> {
    if ctx.t.def.namespaced && ctx.t.name.is_some() && ctx.t.namespace.is_none() {
        return Err(ApiError::not_found_path());
    }
    if ctx.t.sub.as_deref() == Some("scale") {
        return scale::scale(ctx, verb).await;
    }
    match verb {
        "get" => read::get(ctx),
        "list" => read::list(ctx),
        "watch" => crate::watch::watch(ctx),
        "create" => create::create(ctx).await,
        "update" => update::update(ctx).await,
        "patch" => update::patch(ctx).await,
        "delete" => delete::delete(ctx).await,
        "deletecollection" => delete::delete_collection(ctx).await,
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}
