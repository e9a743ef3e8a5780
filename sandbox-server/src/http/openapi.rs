//! The OpenAPI document: the documented routes, plus one operation per enabled tool, then
//! completed by [`contract`] with what utoipa cannot say.

mod contract;

use axum::extract::State;
use sandbox_protocol::{ErrorResponse, PtyClientMessage, PtyServerMessage, ToolSpec, ToolStep};
use utoipa::OpenApi;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, Required, ResponseBuilder};
use utoipa::{PartialSchema, ToSchema};

use super::AppState;
use crate::sandbox::Registry;
use crate::sandbox::registry::DynTool;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandbox-server",
        description = "One isolated workspace behind HTTP: every tool is an operation. \
            Send `Authorization: Bearer <token>` on every /v1 route when the server has a token. \
            The server's own token may do everything; a token minted with `POST /v1/tokens` only \
            what its scopes allow: each operation's `security` names the scope it needs.",
    ),
    tags(
        (name = "tools", description = "List and run tools"),
        (name = "processes", description = "Background processes left by commands"),
        (name = "artifacts", description = "Full command output"),
        (name = "files", description = "Raw files and directory listings in the workspace"),
        (name = "workspace", description = "Snapshots, changes, file versions and archives of the workspace"),
        (name = "state", description = "Side effects outside the workspace"),
        (name = "service", description = "Health and server information"),
        (name = "tokens", description = "Scoped, expiring tokens minted with the server's token"),
    ),
)]
struct ApiDoc;

#[derive(OpenApi)]
#[openapi(paths(
    super::files::get_file,
    super::files::put_file,
    super::files::list_root,
    super::files::list_dir,
    super::files::trace_path
))]
struct FilesDoc;

/// The document for a server with `registry`'s tools enabled.
pub fn openapi(registry: &Registry) -> serde_json::Value {
    let mut document = serde_json::to_value(generated(registry)).unwrap_or_default();
    contract::complete(&mut document);
    scopes(registry, &mut document);
    document
}

/// Each operation's `security`: the bearer token with the scope it needs (OpenAPI 3.1 lets an
/// HTTP scheme's requirement name roles), and `missing_scope` among its 403s.
fn scopes(registry: &Registry, document: &mut serde_json::Value) {
    use super::scopes::{Needs, of_documented};
    use serde_json::{Value, json};
    contract::each_operation(document, |path, method, operation| {
        let Ok(method) = method.to_uppercase().parse::<axum::http::Method>() else {
            return;
        };
        // A token of any scope, or none: the document's default applies.
        let Some(Needs::Scope(scope)) = of_documented(registry, &method, path) else {
            return;
        };
        operation["security"] = json!([{"bearer": [scope.as_str()]}]);
        let lacks = format!("the token lacks the `{scope}` scope (`missing_scope`)");
        match operation.pointer_mut("/responses/403/description") {
            Some(Value::String(text)) => text.push_str(&format!("; or {lacks}")),
            _ => {
                operation["responses"]["403"] = json!({
                    "description": format!("The token lacks the `{scope}` scope (`missing_scope`)"),
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
                });
            }
        }
    });
}

/// What utoipa derives from the routes and the tools.
fn generated(registry: &Registry) -> utoipa::openapi::OpenApi {
    let (public, v1) = super::documented_routes();
    let (_, mut api) = public.merge(v1).split_for_parts();
    api.merge(FilesDoc::openapi());
    let base = ApiDoc::openapi();
    api.info = base.info;
    api.tags = base.tags;
    api.security = Some(vec![SecurityRequirement::new(
        "bearer",
        Vec::<String>::new(),
    )]);

    let components = api.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    components
        .schemas
        .insert(ErrorResponse::name().into_owned(), ErrorResponse::schema());
    let mut nested = Vec::new();
    ErrorResponse::schemas(&mut nested);
    ToolSpec::schemas(&mut nested);
    ToolStep::schemas(&mut nested);
    nested.push((ToolStep::name().into_owned(), ToolStep::schema()));
    // The WebSocket's messages, which no operation names: for clients of `GET …/pty`.
    for (name, schema) in [
        (PtyClientMessage::name(), PtyClientMessage::schema()),
        (PtyServerMessage::name(), PtyServerMessage::schema()),
    ] {
        nested.push((name.into_owned(), schema));
    }
    PtyServerMessage::schemas(&mut nested);
    for (name, schema) in nested {
        components.schemas.insert(name, schema);
    }

    for tool in registry.iter() {
        add_tool(&mut api, tool.as_ref());
    }
    api
}

/// One tool's operation, `POST /v1/tools/{name}`, with its argument and result schemas.
fn add_tool(api: &mut utoipa::openapi::OpenApi, tool: &dyn DynTool) {
    let schemas = tool.schemas();
    let components = api.components.get_or_insert_with(Default::default);
    // The answer: the tool's result, and `step` when asked for.
    let answer_name = format!("{}WithStep", schemas.output_name);
    let answer = AllOfBuilder::new()
        .item(Ref::from_schema_name(&schemas.output_name))
        .item(ObjectBuilder::new().property("step", Ref::from_schema_name("ToolStep")))
        .description(Some(format!(
            "The result of `{}`, with `step` when `since`, `fingerprint` or `inline_max_bytes` asked for it",
            tool.name()
        )));
    components
        .schemas
        .insert(answer_name.clone(), answer.into());
    for (name, schema) in schemas.components {
        components.schemas.insert(name, schema);
    }
    {
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorResponse")))
                        .build(),
                )
                .build()
        };
        let operation = OperationBuilder::new()
            .operation_id(Some(tool.name()))
            .tag("tools")
            .summary(Some(tool.description()))
            .description(Some(format!(
                "Runs the `{}` tool. A non-zero exit code or a timeout is a result (200), not an error.",
                tool.name()
            )))
            .parameters(Some(<super::step::StepQuery as utoipa::IntoParams>::into_params(|| None)))
            .parameter(call_id_header())
            .request_body(Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content(
                        "application/json",
                        ContentBuilder::new().schema(Some(Ref::from_schema_name(&schemas.args_name))).build(),
                    )
                    .build(),
            ))
            .response(
                "200",
                ResponseBuilder::new()
                    .description("The tool's result; `output` is the text to show the model. With `since`, `fingerprint` or `inline_max_bytes`, also `step`: what recording the step needs")
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name(&answer_name)))
                            .build(),
                    )
                    .build(),
            )
            .response("403", error("The path leads outside the workspace (`outside_workspace`) or is not a regular file (`not_a_regular_file`)"))
            .response("404", error("The file does not exist (`file_not_found`), the tool is not enabled (`unknown_tool`), or `since` names no snapshot (`not_found`)"))
            .response("409", error("`bash` only: `Sandbox-Call-Id` already names a process (`process_conflict`)"))
            .response("413", error("The request body is over the limit (`payload_too_large`)"))
            .response("422", error("Invalid arguments, naming the field (`invalid_arguments`), or a tool refusal (`binary_file`, `no_match`, `multiple_matches`)"))
            .response("429", error("Every tool-call slot is busy (`overloaded`); see `Retry-After`"))
            .response("500", error("A server failure (`spawn_failed`, `io_error`, `internal`)"))
            .build();
        api.paths.paths.insert(
            format!("/v1/tools/{}", tool.name()),
            PathItem::new(HttpMethod::Post, operation),
        );
    }
}

/// `Sandbox-Call-Id`, which names a tool call.
fn call_id_header() -> utoipa::openapi::path::Parameter {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    ParameterBuilder::new()
        .name("Sandbox-Call-Id")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "The client's name for this call (as a process id: 1 to 64 letters, digits, `.`, `_` \
             and `-`, not only digits); otherwise the server chooses one. The result's `call_id` \
             is this name, the call's processes carry it, and a `bash` call is a process of kind \
             `call` under it: `GET /v1/processes/{id}/events` follows its output while it runs, \
             `…/signal` and `DELETE` reach it; a `bash` call under a name that already names a \
             process is refused (409).",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::Type::String)
                .min_length(Some(1))
                .max_length(Some(64))
                .pattern(Some(sandbox_protocol::process::PROCESS_ID_PATTERN)),
        ))
        .build()
}

/// This document, generated from the code at its first request and kept as its bytes (a
/// `serde_json::Value` of it held a megabyte and a half of an idle server's memory).
pub(crate) async fn serve_openapi(State(state): State<AppState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let registry = state.registry.clone();
    let body = state
        .openapi
        .get_or_init(|| {
            let document = openapi(&registry);
            axum::body::Bytes::from(
                serde_json::to_vec(&document).expect("a JSON value always serializes"),
            )
        })
        .clone();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
