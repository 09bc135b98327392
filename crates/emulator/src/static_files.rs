//! The static distribution's one route, `/static/devin-rs/remote/{file}`:
//! serves whatever file [`Distribution`](crate::distribution::Distribution)
//! has under that name.

use std::sync::Arc;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::http::ApiError;
use crate::lock::lock;
use crate::shared::{Shared, SharedState};

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/static/devin-rs/remote/{file}", get(serve))
}

async fn serve(
    axum::extract::State(shared): SharedState,
    UrlPath(file): UrlPath<String>,
) -> Response {
    let found = lock(&shared.dist).file(&file);
    match found {
        Some((body, content_type)) => {
            let mut resp = body.into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            resp
        }
        None => ApiError::not_found("file").into_response(),
    }
}
