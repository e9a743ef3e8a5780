//! The extractors handlers take their inputs through, each mapping its rejection to the
//! [`ApiError`] it means, once: a path parameter that cannot be read is `bad_request` (400), a
//! query that fails `invalid_arguments` (422), a body over the limit `payload_too_large` (413)
//! and an unreadable one `bad_request`, a JSON body not sent as JSON `unsupported_media_type`
//! (415) and one that does not decode `invalid_arguments`, naming the field.
//!
//! A route that takes axum's own `Path` or `Query` gets the same error body from
//! [`super::error::json_errors`], with the status axum chose.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::{ApiError, AppState};

/// A path parameter: 400 when it cannot be read.
pub(crate) struct PathParam<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParam<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(value) = Path::<T>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
        Ok(PathParam(value))
    }
}

/// The query string: 422 naming the parameter when it fails.
pub(crate) struct QueryArgs<T>(pub T);

impl<T, S> FromRequestParts<S> for QueryArgs<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(value) = Query::<T>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::InvalidArguments(rejection.body_text()))?;
        Ok(QueryArgs(value))
    }
}

/// The body's bytes, up to the server's limit.
pub(crate) struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError::from_body(&rejection, state.limits.max_body_bytes))?;
        Ok(RawBody(bytes))
    }
}

/// A JSON body, sent as `application/json` (a cross-site form cannot send that without asking
/// first), decoded with an error that names the field.
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let json = sent_as_json(request.headers());
        let RawBody(body) = RawBody::from_request(request, state).await?;
        if !json {
            return Err(ApiError::UnsupportedMediaType(
                "the body must be JSON sent with `Content-Type: application/json`".to_owned(),
            ));
        }
        serde_json::from_slice(&body)
            .map(JsonBody)
            .map_err(|err| ApiError::InvalidArguments(format!("body: {err}")))
    }
}

/// Whether a request says `Content-Type: application/json` (parameters aside).
pub(crate) fn sent_as_json(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}
