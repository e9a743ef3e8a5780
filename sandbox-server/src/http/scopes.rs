//! Which scope each route needs: the one table, read by the authentication middleware, by the
//! MCP endpoint (per tool) and by the OpenAPI document (`x-scope` on every operation).

use axum::http::Method;
use sandbox_protocol::Scope;

use crate::sandbox::Registry;

/// What a route asks of the caller's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// No token at all (`/healthz`, the document, the docs page).
    Nothing,
    /// Any valid token (`/v1/info`, `/v1/tools`, MCP's listing).
    AnyToken,
    Scope(Scope),
}

/// The scope of tool `name`: as its plugin declares it (a command unless it says otherwise),
/// and the MCP server's workspace tools by what they do.
pub(crate) fn of_tool(registry: &Registry, name: &str) -> Option<Scope> {
    if let Some(tool) = registry.get(name) {
        return Some(tool.scope());
    }
    match name {
        "workspace_snapshot" | "workspace_changes" | "file_at_version" => Some(Scope::Read),
        "workspace_restore" => Some(Scope::Write),
        _ => None,
    }
}

/// What `method` on `path`, matched by route template `route`, needs; `None` for a route this
/// table does not know (refused to every minted token; a test keeps every documented route in
/// the table). A tool's route needs the tool's scope, by its decoded name; an unknown tool's,
/// any token (its answer is the 404). The tool's handler checks the scope again.
pub(crate) fn of_request(
    registry: &Registry,
    method: &Method,
    route: &str,
    path: &str,
) -> Option<Needs> {
    use Scope::{Admin, Observe, Read, Run, Write};
    let get = method == Method::GET || method == Method::HEAD;
    let needs = match route {
        "/healthz" | "/openapi.json" | "/docs" => Needs::Nothing,
        "/v1/info" | "/v1/tools" | "/mcp" => Needs::AnyToken,
        "/metrics" => Needs::Scope(Observe),
        "/v1/reset" | "/v1/tokens" | "/v1/tokens/{id}" => Needs::Scope(Admin),
        "/v1/files/{*path}" | "/v1/workspace/archive" => {
            Needs::Scope(if get { Read } else { Write })
        }
        "/v1/dirs"
        | "/v1/dirs/{*path}"
        | "/v1/paths/{*path}"
        | "/v1/artifacts/{id}"
        | "/v1/blobs/{sha256}"
        | "/v1/state/fingerprint"
        | "/v1/workspace/changes"
        | "/v1/workspace/diff"
        | "/v1/workspace/snapshot"
        | "/v1/workspace/snapshots/{id}" => Needs::Scope(Read),
        route if route.starts_with("/v1/processes") || route.starts_with("/v1/shells") => {
            Needs::Scope(Run)
        }
        // The name as the router gives it to the handler (percent-decoded): `b%61sh` is
        // `bash`, and needs what `bash` needs.
        "/v1/tools/{name}" => match tool_in_path(path) {
            Some(Ok(name)) => of_tool(registry, &name).map_or(Needs::AnyToken, Needs::Scope),
            // Not a name the handler can read either: only the root token gets its 400.
            Some(Err(_)) => Needs::Scope(Admin),
            None => Needs::AnyToken,
        },
        _ => return None,
    };
    Some(needs)
}

/// What an operation of the OpenAPI document needs, by its documented path (`{path}` where the
/// router has `{*path}`, each tool's own path where it has `{name}`).
pub(crate) fn of_documented(registry: &Registry, method: &Method, path: &str) -> Option<Needs> {
    let route = if path.starts_with("/v1/tools/") {
        "/v1/tools/{name}".to_owned()
    } else {
        path.replace("{path}", "{*path}")
    };
    of_request(registry, method, &route, path)
}

/// The tool a `/v1/tools/{name}` path names, percent-decoded as the router gives it to the
/// handler (`b%61sh` is `bash`); an error for a name that is not UTF-8 once decoded.
pub(crate) fn tool_in_path(
    path: &str,
) -> Option<Result<std::borrow::Cow<'_, str>, std::str::Utf8Error>> {
    path.strip_prefix("/v1/tools/")
        .map(|name| percent_encoding::percent_decode_str(name).decode_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation the document lists, with every tool enabled, is in the table: a new
    /// route cannot be added without deciding its scope.
    #[test]
    fn every_documented_operation_has_a_scope() {
        let registry = crate::sandbox::tools::builtin();
        let document = crate::http::openapi(&registry);
        let mut missing = Vec::new();
        let mut counted = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                let Ok(parsed) = method.to_uppercase().parse::<Method>() else {
                    continue;
                };
                counted += 1;
                if of_documented(&registry, &parsed, path).is_none() {
                    missing.push(format!("{method} {path}"));
                }
            }
        }
        assert!(counted > 30, "only {counted} operations");
        assert!(missing.is_empty(), "no scope for {missing:?}");
        for tool in registry.iter() {
            assert!(of_tool(&registry, tool.name()).is_some());
        }
        for name in [
            "workspace_snapshot",
            "workspace_changes",
            "file_at_version",
            "workspace_restore",
        ] {
            assert!(of_tool(&registry, name).is_some(), "{name}");
        }
    }

    #[test]
    fn a_tool_route_needs_the_tool_scope() {
        let registry = crate::sandbox::tools::builtin();
        let needs = |path: &str| of_request(&registry, &Method::POST, "/v1/tools/{name}", path);
        assert_eq!(needs("/v1/tools/bash"), Some(Needs::Scope(Scope::Run)));
        assert_eq!(
            needs("/v1/tools/read_file"),
            Some(Needs::Scope(Scope::Read))
        );
        assert_eq!(
            needs("/v1/tools/search_replace"),
            Some(Needs::Scope(Scope::Write))
        );
        assert_eq!(needs("/v1/tools/nope"), Some(Needs::AnyToken));
    }
}
