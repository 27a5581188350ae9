//! What every dialect's OpenAPI document shares: the bearer-key security scheme, and the
//! error statuses of each operation added from one table, all in the dialect's error shape.

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, ResponseBuilder};

/// Per operation id, the statuses it can answer besides its success, with the codes
/// each carries.
pub type Errors = &'static [(&'static str, &'static [(u16, &'static str)])];

fn operations(api: &mut OpenApi) -> impl Iterator<Item = &mut Operation> {
    api.paths.paths.values_mut().flat_map(|item| {
        [
            item.get.as_mut(),
            item.put.as_mut(),
            item.post.as_mut(),
            item.delete.as_mut(),
            item.patch.as_mut(),
            item.head.as_mut(),
            item.options.as_mut(),
            item.trace.as_mut(),
        ]
        .into_iter()
        .flatten()
    })
}

/// Adds the bearer scheme and, to every operation, its own error statuses from `errors`
/// and then the `common` ones it does not have yet, each with a body of the
/// `error_schema` component. Returns the document as pretty JSON, newline-terminated.
pub fn document_json(
    mut api: OpenApi,
    error_schema: &str,
    errors: Errors,
    common: &[(u16, &str)],
) -> String {
    let scheme = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some(
            "An API key (from SANDBOXD_MASTER_KEY or `sandboxd keys create`)",
        ))
        .build();
    api.components
        .get_or_insert_with(Default::default)
        .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    let body = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(error_schema)))
        .build();
    for op in operations(&mut api) {
        let id = op.operation_id.clone().unwrap_or_default();
        let own = errors
            .iter()
            .find(|(name, _)| *name == id)
            .map(|(_, list)| *list)
            .unwrap_or(&[]);
        for (status, codes) in own.iter().chain(common) {
            let key = status.to_string();
            if op.responses.responses.contains_key(&key) {
                continue;
            }
            let response = ResponseBuilder::new()
                .description(*codes)
                .content("application/json", body.clone())
                .build();
            op.responses.responses.insert(key, response.into());
        }
    }
    let mut json = api
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    json.push('\n');
    json
}

/// Fails (a test) when `committed`, the document in `docs/openapi/<dialect>.json`, is not
/// what the code generates, saying how to regenerate it.
pub fn assert_current(dialect: &str, committed: &str, generated: &str) {
    assert!(
        committed == generated,
        "docs/openapi/{dialect}.json is stale: run \
         `sandboxd openapi --dialect {dialect} > docs/openapi/{dialect}.json`"
    );
}

/// Operation ids of `api` that `errors` does not list (a table that forgot a route).
pub fn unlisted(api: &OpenApi, errors: Errors) -> Vec<String> {
    let mut api = api.clone();
    operations(&mut api)
        .filter_map(|op| op.operation_id.clone())
        .filter(|id| !errors.iter().any(|(name, _)| name == id))
        .collect()
}
