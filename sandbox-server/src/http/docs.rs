//! `/docs`: an interactive API page that works offline; its HTML and script are compiled in.

use axum::response::Html;

pub(crate) async fn serve_docs() -> Html<&'static str> {
    Html(include_str!("docs.html"))
}
