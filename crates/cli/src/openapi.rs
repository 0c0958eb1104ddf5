//! `/api/openapi.json`: an OpenAPI 3 document generated from the clap
//! definitions of the served commands, so that it lists exactly the flags
//! the API accepts, with their help texts, allowed values and defaults.

use clap::{Arg, ArgAction};
use serde_json::{json, Map, Value};

/// One GET path per command; arguments `refused` (by command) are left out
/// (the server sets or refuses them); `downloads` answer files, not JSON.
pub fn document(served: &[&str], downloads: &[&str], refused: &dyn Fn(&str, &Arg) -> bool) -> Value {
    let mut paths = Map::new();
    for command in served {
        let words: Vec<&str> = command.split('/').collect();
        let cmd = crate::serve::subcommand(&words);
        let mut params: Vec<Value> = cmd
            .get_arguments()
            .filter(|a| !refused(command, a))
            .filter(|a| a.get_long().is_some() || a.is_positional())
            .map(parameter)
            .collect();
        if cmd.get_arguments().any(|a| a.get_long() == Some("db")) {
            params.push(json!({ "name": "db", "in": "query", "required": false,
                "description": if cmd.get_arguments().any(|a| a.get_long() == Some("source")) {
                    "Name of a served database (`loupe serve --db NAME=DIR`) or fleet source (`--source NAME=URL`; see /api/databases); default: the first database."
                } else {
                    "Name of a served database (`loupe serve --db NAME=DIR`); default: the first."
                },
                "schema": { "type": "string" } }));
        }
        let about = cmd.get_about().map(|s| s.to_string()).unwrap_or_default();
        paths.insert(
            format!("/api/{command}"),
            json!({ "get": {
                "operationId": command.replace('/', "_"),
                "summary": about,
                "description": if downloads.contains(command) {
                    format!("The file `loupe {} ... -o FILE` writes for the same flags, as an attachment.", words.join(" "))
                } else {
                    format!("What `loupe {} ... --format json` prints for the same flags.", words.join(" "))
                },
                "parameters": params,
                "responses": responses(downloads.contains(command), crate::openapi_schemas::answer(command)),
            }}),
        );
    }
    json!({
        "openapi": "3.0.3",
        "info": { "title": "Loupe", "version": env!("CARGO_PKG_VERSION"),
            "description": "Read-only JSON API of `loupe serve`: each path runs the CLI command of the same name with the query parameters as its flags (repeat a parameter to repeat its flag; `flag=` sets a switch)." },
        "paths": paths,
        "components": { "schemas": crate::openapi_schemas::schemas().into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<String, Value>>() },
    })
}

fn parameter(a: &Arg) -> Value {
    let value_name = a.get_value_names().and_then(|v| v.first()).map(|v| v.to_ascii_lowercase());
    let name = match a.get_long() {
        Some(l) => l.to_string(),
        None => value_name.unwrap_or_else(|| a.get_id().to_string()),
    };
    let mut help = a.get_long_help().or(a.get_help()).map(|h| h.to_string()).unwrap_or_default();
    if a.is_positional() {
        help += ". Over HTTP each part is NAME:EPOCH, NAME (its current epoch) or EPOCH (of the first database)";
        help += if a.get_id() == "a" || a.get_id() == "b" {
            "; or, for a served fleet source, NAME:SELECTION (the whole side, e.g. fleet:host=web-1,since=1h)."
        } else {
            "."
        };
    }
    let mut schema = Map::new();
    let possible: Vec<String> = a.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| v.get_name().to_string()).collect();
    if matches!(a.get_action(), ArgAction::SetTrue) {
        schema.insert("type".into(), "boolean".into());
    } else {
        schema.insert("type".into(), "string".into());
        if !possible.is_empty() {
            schema.insert("enum".into(), possible.into());
        }
        if let Some(d) = a.get_default_values().first() {
            schema.insert("default".into(), d.to_string_lossy().into_owned().into());
        }
    }
    let many = matches!(a.get_action(), ArgAction::Append) || a.get_num_args().is_some_and(|n| n.max_values() > 1);
    let schema = if many { json!({ "type": "array", "items": schema }) } else { Value::Object(schema) };
    json!({ "name": name, "in": "query", "required": a.is_required_set(), "description": help,
        "schema": schema, "explode": true, "style": "form" })
}

fn responses(download: bool, answer: Option<&str>) -> Value {
    let error = |what: &str| json!({ "description": what, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
    let ok = if download {
        json!({ "description": "The exported file (pprof: application/gzip; collapsed: text/plain; perfetto: application/octet-stream; speedscope: application/json)",
            "content": { "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } } })
    } else {
        let schema = answer.map_or_else(|| json!({ "type": "object" }), |a| json!({ "$ref": format!("#/components/schemas/{a}") }));
        json!({ "description": "The command's JSON", "content": { "application/json": { "schema": schema } } })
    };
    json!({
        "200": ok,
        "400": error("A flag the command does not have, or a bad value"),
        "404": error("A missing epoch, image, procedure, event or database"),
        "500": error("The command failed"),
        "503": error("All workers busy past the wait in line, or the time limit passed"),
    })
}

/// `POST /api/ingest/pprof` (`loupe serve --allow-ingest`): a pprof body stored in a served fleet source.
pub fn ingest_path() -> Value {
    let error = |what: &str| json!({ "description": what, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
    let query = |name: &str, many: bool, what: &str| {
        let schema = if many { json!({ "type": "array", "items": { "type": "string" } }) } else { json!({ "type": "string" }) };
        json!({ "name": name, "in": "query", "required": false, "description": what, "schema": schema, "explode": true, "style": "form" })
    };
    let answer = json!({ "type": "object", "required": ["source", "host", "event", "samples", "stacks"], "properties": {
        "source": { "type": "string" }, "host": { "type": "string" }, "event": { "type": "string" },
        "samples": { "type": "integer" }, "stacks": { "type": "integer" } } });
    json!({ "post": {
        "operationId": "ingest_pprof",
        "summary": "Store a pprof profile in a served fleet source",
        "description": "What `loupe ingest pprof FILE --ship URL --label ...` stores, for the profile in the body (profile.proto, gzipped or not; one batch, so a retry after a lost answer is stored twice and counted once). Answered only when the server runs with --allow-ingest (else 403); beyond loopback the token is required as for every path.",
        "parameters": [
            query("label", true, "KEY=VALUE on every row (repeatable); host=NAME names the host (default: the server's hostname)."),
            query("db", false, "Name of the served fleet source to store into (default: the first --source)."),
            query("event", false, "The pprof sample type to read (default: samples/count for CPU profiles, else the first counted one)."),
        ],
        "requestBody": { "required": true, "content": { "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } } },
        "responses": {
            "200": { "description": "What was stored", "content": { "application/json": { "schema": answer } } },
            "400": error("A corrupt profile (the message says why), a bad label or parameter, or no fleet source served"),
            "401": error("The token is missing or wrong"),
            "403": error("Ingest is off (no --allow-ingest)"),
            "411": error("No Content-Length"),
            "413": error("The body exceeds --max-ingest-mb"),
            "500": error("The fleet store refused or could not be reached"),
        },
    }})
}
