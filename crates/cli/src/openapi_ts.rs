//! TypeScript types for the front end, generated from the OpenAPI
//! document's schemas (`web/src/api.gen.ts`): an interface per answer and
//! `Answers`, each served command's answer type by path. The unit test
//! below fails when the checked-in file differs from what the document
//! generates (`LOUPE_BLESS=1` rewrites it).

use serde_json::Value;

const HEADER: &str = "// Generated from loupe's OpenAPI document (/api/openapi.json, crates/cli/src/openapi_schemas.rs): do not edit.\n\
// Regenerate: LOUPE_BLESS=1 cargo test --release -p loupe --bin loupe api_types\n";

/// The whole file for `doc`.
pub fn generate(doc: &Value) -> String {
    let mut out = String::from(HEADER);
    for (name, schema) in doc["components"]["schemas"].as_object().into_iter().flatten() {
        out += "\n";
        if let Some(d) = schema["description"].as_str() {
            out += &format!("/** {} */\n", d.replace("*/", "* /"));
        }
        if schema.get("properties").is_some() {
            out += &format!("export interface {name} {}\n", object(schema, 0));
        } else {
            out += &format!("export type {name} = {};\n", ty(schema, 0));
        }
    }
    out += "\n/** Each `/api/<command>` path's JSON answer. */\nexport interface Answers {\n";
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let schema = &item["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        if schema.get("$ref").is_some() {
            out += &format!("  '{}': {};\n", path.trim_start_matches("/api/"), ty(schema, 1));
        }
    }
    out + "}\n"
}

fn ty(s: &Value, depth: usize) -> String {
    let t = if let Some(r) = s["$ref"].as_str() {
        r.rsplit('/').next().unwrap_or(r).to_string()
    } else {
        match s["type"].as_str() {
            Some("string") => "string".into(),
            Some("integer" | "number") => "number".into(),
            Some("boolean") => "boolean".into(),
            Some("array") => {
                let item = ty(&s["items"], depth);
                if item.contains(' ') && !item.starts_with('{') {
                    format!("({item})[]")
                } else {
                    format!("{item}[]")
                }
            }
            Some("object") if s.get("properties").is_some() => object(s, depth),
            Some("object") => match s.get("additionalProperties") {
                Some(v) if v.is_object() => format!("Record<string, {}>", ty(v, depth)),
                _ => "Record<string, unknown>".into(),
            },
            _ => "unknown".into(),
        }
    };
    if s["nullable"] == true {
        format!("{t} | null")
    } else {
        t
    }
}

fn object(s: &Value, depth: usize) -> String {
    let required: Vec<&str> = s["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let pad = "  ".repeat(depth + 1);
    let mut out = String::from("{\n");
    for (k, v) in s["properties"].as_object().into_iter().flatten() {
        let opt = if required.contains(&k.as_str()) { "" } else { "?" };
        out += &format!("{pad}{k}{opt}: {};\n", ty(v, depth + 1));
    }
    out + &"  ".repeat(depth) + "}"
}

#[cfg(test)]
mod tests {
    #[test]
    fn api_types_match_the_checked_in_file() {
        // Checks that web/src/api.gen.ts is what the OpenAPI document generates (the front end's types cannot drift).
        let doc: serde_json::Value = serde_json::from_slice(&loupe_serve::Api::openapi(&crate::serve::CliApi::empty())).unwrap();
        let want = super::generate(&doc);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/src/api.gen.ts");
        if std::env::var_os("LOUPE_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is stale: regenerate it with LOUPE_BLESS=1 cargo test --release -p loupe --bin loupe api_types",
            path.display()
        );
    }
}
