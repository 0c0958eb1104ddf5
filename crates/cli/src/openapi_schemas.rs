//! The JSON shape of each served answer, as OpenAPI 3.0 schemas: one per
//! command (`components.schemas`), what `loupe COMMAND --format json`
//! prints. The front end's types are generated from these
//! (`web/src/api.gen.ts`, see `openapi_ts.rs`), and the serve tests
//! check every answer against them, so the three cannot drift apart.
//! Objects list the keys every answer has as required; keys present only
//! with some flags (multi-event counts, `--by line`'s `line`) are optional.

use serde_json::{json, Map, Value};

fn s() -> Value {
    json!({ "type": "string" })
}
fn int() -> Value {
    json!({ "type": "integer" })
}
fn num() -> Value {
    json!({ "type": "number" })
}
fn boolean() -> Value {
    json!({ "type": "boolean" })
}
fn nullable(mut v: Value) -> Value {
    v["nullable"] = true.into();
    v
}
fn arr(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}
/// An object whose keys are names (events, images, reasons).
fn map(values: Value) -> Value {
    json!({ "type": "object", "additionalProperties": values })
}
fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}
/// An object with `required` keys and `optional` ones.
fn obj(required: &[(&str, Value)], optional: &[(&str, Value)]) -> Value {
    let mut props = Map::new();
    for (k, v) in required.iter().chain(optional) {
        props.insert(k.to_string(), v.clone());
    }
    json!({ "type": "object", "required": required.iter().map(|(k, _)| *k).collect::<Vec<_>>(), "properties": props })
}

/// (schema name, schema) of every answer and the types they share.
pub fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        ("Error", obj(&[("error", s())], &[])),
        ("TopAnswer", top()),
        ("FlameNode", flame_node()),
        ("FlameAnswer", flame()),
        ("Epoch", epoch()),
        ("EpochsAnswer", arr(reference("Epoch"))),
        ("DiffAnswer", diff()),
        ("StatsAnswer", stats()),
        ("AnnotateAnswer", annotate()),
        ("CalcAnswer", calc()),
        ("DataAnswer", data()),
        ("Lock", lock()),
        ("LocksAnswer", obj(&[("duration_s", num()), ("dropped", int()), ("locks", arr(reference("Lock")))], &[])),
        ("Decision", decision()),
        (
            "OptimizeStatusAnswer",
            obj(&[("image", s()), ("installed", boolean()), ("original", nullable(s())), ("decisions", arr(reference("Decision")))], &[]),
        ),
    ]
}

/// The schema name of `command`'s answer (`None`: a file, not JSON).
pub fn answer(command: &str) -> Option<&'static str> {
    Some(match command {
        "top" => "TopAnswer",
        "flame" => "FlameAnswer",
        "epochs" => "EpochsAnswer",
        "diff" => "DiffAnswer",
        "stats" => "StatsAnswer",
        "annotate" => "AnnotateAnswer",
        "calc" => "CalcAnswer",
        "data/profile" | "data/classify" | "data/workingset" => "DataAnswer",
        "locks" => "LocksAnswer",
        "optimize/status" => "OptimizeStatusAnswer",
        _ => return None,
    })
}

/// The table (`--by`: `rows` of samples and percent), with --children the
/// call-graph rows (inclusive and self), with --callers/--callees one
/// procedure's neighbours.
fn top() -> Value {
    let row = obj(
        &[],
        &[
            ("image", s()),
            ("procedure", nullable(s())),
            ("line", nullable(s())),
            ("address", nullable(s())),
            ("samples", int()),
            ("percent", num()),
            ("counts", map(int())),
            ("inclusive", int()),
            ("self", int()),
            ("inclusive_percent", num()),
            ("self_percent", num()),
        ],
    );
    let neighbour = obj(&[("procedure", s()), ("samples", int()), ("percent", num())], &[]);
    obj(
        &[("total_samples", int())],
        &[
            ("rows", arr(row)),
            ("event", nullable(s())),
            ("events", arr(s())),
            ("unknown_samples", int()),
            ("truncated_samples", int()),
            ("unnamed_samples", map(int())),
            ("procedure", s()),
            ("inclusive", int()),
            ("self", int()),
            ("callers", arr(neighbour.clone())),
            ("callees", arr(neighbour)),
        ],
    )
}

fn flame_node() -> Value {
    let mut v = obj(
        &[("name", s()), ("self", int()), ("total", int()), ("children", arr(reference("FlameNode")))],
        &[("image", s()), ("inlined", boolean())],
    );
    v["description"] = "A frame reached by one path from the root (the root: `all`, without image). With `min-share`, the \
        children below that share of all samples are folded into one last child named `(other)`, without image, whose self and \
        total are their samples; every other node's figures are exact."
        .into();
    v
}

fn flame() -> Value {
    obj(
        &[
            ("event", s()),
            ("total", int()),
            ("epochs", arr(int())),
            ("unwind_stopped", int()),
            ("inverted", boolean()),
            ("root", reference("FlameNode")),
        ],
        &[],
    )
}

fn epoch() -> Value {
    obj(
        &[
            ("id", int()),
            ("current", boolean()),
            ("start", s()),
            ("end", nullable(s())),
            ("start_unix_ns", int()),
            ("end_unix_ns", nullable(int())),
            ("samples", int()),
            ("lost", int()),
            ("events", map(int())),
            ("images", map(int())),
            ("host", nullable(s())),
            ("kernel", nullable(s())),
        ],
        &[],
    )
}

/// A bucket's key: what `--by` names.
fn key_fields() -> Vec<(&'static str, Value)> {
    vec![("image", nullable(s())), ("procedure", nullable(s())), ("line", nullable(s())), ("lock", s())]
}

fn diff() -> Value {
    let mut optional = key_fields();
    optional.push(("q_value", nullable(num())));
    let row =
        obj(&[("a", num()), ("b", num()), ("score", nullable(num())), ("p_value", nullable(num())), ("significant", boolean())], &optional);
    obj(&[("mode", s()), ("rows", arr(row))], &[("event", s()), ("a_total", int()), ("b_total", int()), ("level", num())])
}

fn stats() -> Value {
    let row = obj(
        &[
            ("range_percent", num()),
            ("sum", int()),
            ("percent", num()),
            ("n", int()),
            ("mean", num()),
            ("std_dev", num()),
            ("min", num()),
            ("max", num()),
            ("p_value", nullable(num())),
            ("significant", boolean()),
        ],
        &key_fields(),
    );
    obj(&[("event", s()), ("sets", arr(int())), ("total", int()), ("rows", arr(row))], &[])
}

fn annotate() -> Value {
    let insn = obj(
        &[
            ("address", s()),
            ("instruction", s()),
            ("samples", map(int())),
            ("percent", map(num())),
            ("file", nullable(s())),
            ("line", nullable(int())),
        ],
        &[],
    );
    let line = obj(&[("file", s()), ("line", int()), ("samples", int())], &[]);
    obj(
        &[
            ("image", s()),
            ("procedure", s()),
            ("events", arr(s())),
            ("total_samples", map(int())),
            ("instructions", arr(insn)),
            ("lines", arr(line)),
        ],
        &[],
    )
}

fn calc() -> Value {
    let insn = obj(
        &[("address", s()), ("instruction", s()), ("samples", int()), ("executions", nullable(num())), ("cpi", nullable(num()))],
        &[("confidence", s()), ("min_cycles", num()), ("stall", num()), ("culprits", arr(obj(&[("cause", s())], &[])))],
    );
    obj(
        &[("procedure", s()), ("image", s()), ("event", s()), ("instructions", arr(insn))],
        &[
            ("epochs", s()),
            ("model", s()),
            ("clock", s()),
            ("cpu_ghz", num()),
            ("period_cycles", num()),
            ("blocks", arr(obj(&[("start", s()), ("end", s())], &[]))),
            ("edges", arr(obj(&[("from", s()), ("to", s())], &[]))),
        ],
    )
}

/// data profile / classify / workingset: rows per type and field (their
/// columns differ by view; see docs/dataprof.md).
fn data() -> Value {
    obj(&[], &[("rows", arr(json!({ "type": "object" }))), ("source", nullable(s()))])
}

fn lock() -> Value {
    obj(
        &[
            ("name", s()),
            ("kind", s()),
            ("pid", int()),
            ("address", s()),
            ("acquisitions", int()),
            ("hold_ns", int()),
            ("wait_ns", int()),
            ("held_fraction", num()),
            ("wait_fraction", num()),
            ("max_hold_ns", int()),
            ("max_wait_ns", int()),
        ],
        &[],
    )
}

fn decision() -> Value {
    obj(
        &[("unix_time", int()), ("image", s()), ("build_id", s()), ("action", s()), ("reason", s())],
        &[("candidate_build_id", nullable(s())), ("replaces", s()), ("measurement", nullable(json!({ "type": "object" })))],
    )
}
