//! The XML event specification (PEM §3.1, Figure 2): parsing and validation.
//!
//! The rules are those of `schema/loupe-events.xsd`; they are checked here as
//! well so that every error names the file, line and problem without an
//! external validator. Ids 1..15 are reserved for the built-in phase markers.

use std::fmt;
use std::path::Path;

/// A scalar field type; every scalar is little-endian on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F64,
}

impl Scalar {
    pub fn parse(s: &str) -> Option<Scalar> {
        Some(match s {
            "uint8" => Scalar::U8,
            "uint16" => Scalar::U16,
            "uint32" => Scalar::U32,
            "uint64" => Scalar::U64,
            "int8" => Scalar::I8,
            "int16" => Scalar::I16,
            "int32" => Scalar::I32,
            "int64" => Scalar::I64,
            "float64" => Scalar::F64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Scalar::U8 => "uint8",
            Scalar::U16 => "uint16",
            Scalar::U32 => "uint32",
            Scalar::U64 => "uint64",
            Scalar::I8 => "int8",
            Scalar::I16 => "int16",
            Scalar::I32 => "int32",
            Scalar::I64 => "int64",
            Scalar::F64 => "float64",
        }
    }

    /// Bytes on the wire.
    pub fn size(self) -> usize {
        match self {
            Scalar::U8 | Scalar::I8 => 1,
            Scalar::U16 | Scalar::I16 => 2,
            Scalar::U32 | Scalar::I32 => 4,
            Scalar::U64 | Scalar::I64 | Scalar::F64 => 8,
        }
    }

    pub fn signed(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64)
    }
}

/// A field's type: a scalar, a string (u16 byte length + UTF-8 bytes) or a
/// list of scalars (u16 element count + elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    Scalar(Scalar),
    String,
    List(Scalar),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: FieldType,
    pub description: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub id: u16,
    pub layer: String,
    pub class: String,
    pub specifier: String,
    pub description: String,
    pub fields: Vec<Field>,
}

impl Event {
    /// `Layer::Class::Specifier`, as in the spec.
    pub fn full_name(&self) -> String {
        format!("{}::{}::{}", self.layer, self.class, self.specifier)
    }

    /// `layer_class_specifier` in lower case: the stub function's name.
    pub fn snake_name(&self) -> String {
        format!("{}_{}_{}", snake(&self.layer), snake(&self.class), snake(&self.specifier))
    }
}

/// A whole specification: the built-in phase markers, then the events of
/// every file in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub name: String,
    pub events: Vec<Event>,
}

impl Spec {
    pub fn by_id(&self, id: u16) -> Option<&Event> {
        self.events.iter().find(|e| e.id == id)
    }

    pub fn by_name(&self, name: &str) -> Option<&Event> {
        self.events.iter().find(|e| e.full_name() == name)
    }
}

/// Ids of the built-in phase markers, present in every spec.
pub const PHASE_BEGIN: u16 = 1;
pub const PHASE_END: u16 = 2;
/// The first id a spec's events may use.
pub const FIRST_USER_ID: u16 = 16;

fn builtins() -> Vec<Event> {
    let field = |name: &str, s, d: &str| Field { name: name.into(), ty: FieldType::Scalar(s), description: d.into() };
    let phase = |id, spec: &str, what: &str| Event {
        id,
        layer: "Loupe".into(),
        class: "Phase".into(),
        specifier: spec.into(),
        description: format!("{what} of an application phase (PEM phase marker)"),
        fields: vec![
            field("phase", Scalar::U32, "phase number chosen by the application"),
            field("iteration", Scalar::U64, "iteration of the phase"),
        ],
    };
    vec![phase(PHASE_BEGIN, "Begin", "Start"), phase(PHASE_END, "End", "End")]
}

/// One validation error: which file, which line, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: String,
    pub line: u32,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for SpecError {}

/// Every error found in a set of files (validation does not stop at the first).
#[derive(Debug)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for SpecErrors {}

/// Reads and validates spec files; their events are concatenated after the built-ins.
pub fn load_files(paths: &[&Path]) -> Result<Spec, SpecErrors> {
    let mut sources = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        match std::fs::read_to_string(p) {
            Ok(text) => sources.push((name, text)),
            Err(e) => return Err(SpecErrors(vec![SpecError { file: name, line: 0, message: format!("cannot read: {e}") }])),
        }
    }
    let refs: Vec<(&str, &str)> = sources.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    parse(&refs)
}

/// Parses and validates spec texts given as (file name, contents).
pub fn parse(sources: &[(&str, &str)]) -> Result<Spec, SpecErrors> {
    let mut events = builtins();
    let mut errors = Vec::new();
    let mut name = String::new();
    for (file, text) in sources {
        let mut v = Validator { file, text, errors: &mut errors };
        if let Some((spec_name, evs)) = v.document() {
            if name.is_empty() {
                name = spec_name;
            }
            events.extend(evs);
        }
    }
    check_unique(&events, &mut errors);
    for ev in &events {
        let max = crate::record::max_size(ev);
        if max > crate::record::MAX_RECORD {
            errors.push(SpecError {
                file: "<specs>".into(),
                line: 0,
                message: format!(
                    "event {} can reach {max} bytes (strings up to {} bytes, lists up to {} elements); at most {} fit a record",
                    ev.full_name(),
                    crate::record::MAX_STRING,
                    crate::record::MAX_LIST,
                    crate::record::MAX_RECORD
                ),
            });
        }
    }
    if errors.is_empty() {
        Ok(Spec { name, events })
    } else {
        Err(SpecErrors(errors))
    }
}

/// Names and ids must be unique across files too; `line` is 0 here because
/// the clash involves two places, both named in the message.
fn check_unique(events: &[Event], errors: &mut Vec<SpecError>) {
    for (i, a) in events.iter().enumerate() {
        for b in &events[..i] {
            if a.id == b.id {
                errors.push(SpecError {
                    file: "<specs>".into(),
                    line: 0,
                    message: format!("event id {} used by both {} and {}", a.id, b.full_name(), a.full_name()),
                });
            }
            if a.snake_name() == b.snake_name() {
                errors.push(SpecError {
                    file: "<specs>".into(),
                    line: 0,
                    message: format!("events {} and {} have the same stub name", b.full_name(), a.full_name()),
                });
            }
        }
    }
}

struct Validator<'a> {
    file: &'a str,
    text: &'a str,
    errors: &'a mut Vec<SpecError>,
}

type Node<'a, 'i> = roxmltree::Node<'a, 'i>;

impl Validator<'_> {
    fn err(&mut self, line: u32, message: String) {
        self.errors.push(SpecError { file: self.file.to_string(), line, message });
    }

    fn line(&self, node: Node) -> u32 {
        node.document().text_pos_at(node.range().start).row
    }

    fn document(&mut self) -> Option<(String, Vec<Event>)> {
        let doc = match roxmltree::Document::parse(self.text) {
            Ok(d) => d,
            Err(e) => {
                self.err(e.pos().row, format!("not well-formed XML: {e}"));
                return None;
            }
        };
        let root = doc.root_element();
        if root.tag_name().name() != "events" {
            self.err(self.line(root), format!("root element is <{}>, expected <events>", root.tag_name().name()));
            return None;
        }
        let name = self.ident_attr(root, "name").unwrap_or_default();
        let mut next_id = FIRST_USER_ID;
        let mut events = Vec::new();
        let mut seen = 0;
        for child in root.children().filter(|n| n.is_element()) {
            seen += 1;
            if child.tag_name().name() != "event" {
                self.err(self.line(child), format!("unexpected <{}> in <events>", child.tag_name().name()));
                continue;
            }
            if let Some(ev) = self.event(child, &mut next_id) {
                events.push(ev);
            }
        }
        if seen == 0 {
            self.err(self.line(root), "no <event> in <events>".into());
        }
        Some((name, events))
    }

    fn attr(&mut self, node: Node, attr: &str) -> Option<String> {
        let v = node.attribute(attr).map(str::to_string);
        if v.is_none() {
            let line = self.line(node);
            self.err(line, format!("<{}> lacks the required attribute '{attr}'", node.tag_name().name()));
        }
        v
    }

    fn ident_attr(&mut self, node: Node, attr: &str) -> Option<String> {
        let v = self.attr(node, attr)?;
        if !is_ident(&v) {
            let line = self.line(node);
            self.err(line, format!("'{v}' in {attr}= is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"));
            return None;
        }
        Some(v)
    }

    fn event(&mut self, node: Node, next_id: &mut u16) -> Option<Event> {
        let line = self.line(node);
        let name = self.attr(node, "name");
        let description = self.attr(node, "description");
        let id = self.event_id(node, next_id);
        let kids: Vec<Node> = node.children().filter(|n| n.is_element()).collect();
        let expect = ["layerId", "classId", "specifier"];
        let mut parts = Vec::new();
        for (i, want) in expect.iter().enumerate() {
            match kids.get(i) {
                Some(k) if k.tag_name().name() == *want => parts.push(self.ident_attr(*k, "value")),
                Some(k) => {
                    let l = self.line(*k);
                    self.err(l, format!("expected <{want}>, found <{}>", k.tag_name().name()));
                    return None;
                }
                None => {
                    self.err(line, format!("<event> lacks <{want}>"));
                    return None;
                }
            }
        }
        let fields = match kids.get(3) {
            Some(k) if k.tag_name().name() == "fields" => self.fields(*k),
            Some(k) => {
                let l = self.line(*k);
                self.err(l, format!("expected <fields>, found <{}>", k.tag_name().name()));
                None
            }
            None => Some(Vec::new()),
        };
        if let Some(extra) = kids.get(4) {
            let l = self.line(*extra);
            self.err(l, format!("unexpected <{}> after <fields>", extra.tag_name().name()));
        }
        let (layer, class, specifier) = (parts[0].clone()?, parts[1].clone()?, parts[2].clone()?);
        let name = name?;
        let expected = format!("{layer}::{class}::{specifier}");
        if name != expected {
            self.err(line, format!("event name '{name}' does not match its layerId::classId::specifier '{expected}'"));
            return None;
        }
        Some(Event { id: id?, layer, class, specifier, description: description?, fields: fields? })
    }

    fn event_id(&mut self, node: Node, next_id: &mut u16) -> Option<u16> {
        let Some(text) = node.attribute("id") else {
            let id = *next_id;
            *next_id = next_id.checked_add(1)?;
            return Some(id);
        };
        match text.parse::<u16>() {
            Ok(id) if id >= FIRST_USER_ID => {
                *next_id = id.saturating_add(1);
                Some(id)
            }
            _ => {
                let line = self.line(node);
                self.err(line, format!("id '{text}' is not an integer in {FIRST_USER_ID}..=65535"));
                None
            }
        }
    }

    fn fields(&mut self, node: Node) -> Option<Vec<Field>> {
        let mut out = Vec::new();
        let mut ok = true;
        for f in node.children().filter(|n| n.is_element()) {
            match self.field(f, &out) {
                Some(field) => out.push(field),
                None => ok = false,
            }
        }
        if out.len() > 64 {
            let line = self.line(node);
            self.err(line, format!("{} fields; at most 64", out.len()));
            ok = false;
        }
        ok.then_some(out)
    }

    fn field(&mut self, node: Node, before: &[Field]) -> Option<Field> {
        let line = self.line(node);
        if node.tag_name().name() != "field" {
            self.err(line, format!("unexpected <{}> in <fields>", node.tag_name().name()));
            return None;
        }
        let name = self.ident_attr(node, "name");
        let ty = self.attr(node, "type");
        let description = self.attr(node, "description");
        let elt = node.attribute("eltType");
        let ty = match (ty?.as_str(), elt) {
            ("list", Some(e)) => match Scalar::parse(e) {
                Some(s) => FieldType::List(s),
                None => return self.bad(line, format!("eltType '{e}' is not a scalar type (uint8..uint64, int8..int64, float64)")),
            },
            ("list", None) => return self.bad(line, "a field of type 'list' needs eltType".into()),
            (t, Some(_)) => return self.bad(line, format!("eltType is only allowed on type 'list', not '{t}'")),
            ("string", None) => FieldType::String,
            (t, None) => match Scalar::parse(t) {
                Some(s) => FieldType::Scalar(s),
                None => return self.bad(line, format!("unknown field type '{t}'")),
            },
        };
        let name = name?;
        if before.iter().any(|f| f.name == name) {
            return self.bad(line, format!("field '{name}' appears twice"));
        }
        Some(Field { name, ty, description: description? })
    }

    fn bad<T>(&mut self, line: u32, message: String) -> Option<T> {
        self.err(line, message);
        None
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `PageFault` -> `page_fault`, `HWPerf` -> `hwperf`, `OS` -> `os`.
pub fn snake(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let prev_lower = i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
        if c.is_ascii_uppercase() && prev_lower {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIG2: &str = "<events name='hw'>
<event name='HW::HWPerf::HPMsAndPC' description='Hardware counter events and program counter for threadId'>
  <layerId value='HW' />
  <classId value='HWPerf' />
  <specifier value='HPMsAndPC' />
  <fields>
    <field name='pc' type='uint64' description='program counter' />
    <field name='threadId' type='uint64' description='kernel thread id' />
    <field name='counterValues' type='list' eltType='uint64' description='counter values.' />
  </fields>
</event>
</events>";

    // The paper's Figure 2 parses into one event after the two built-in phase markers, with id 16.
    #[test]
    fn figure2_parses() {
        let spec = parse(&[("fig2.xml", FIG2)]).unwrap();
        assert_eq!(spec.events.len(), 3);
        let ev = spec.by_name("HW::HWPerf::HPMsAndPC").unwrap();
        assert_eq!(ev.id, 16);
        assert_eq!(ev.snake_name(), "hw_hwperf_hpms_and_pc");
        assert_eq!(ev.fields[2].ty, FieldType::List(Scalar::U64));
        assert_eq!(spec.by_id(PHASE_BEGIN).unwrap().full_name(), "Loupe::Phase::Begin");
    }

    // A bad type is reported with the file name and the field's line (7).
    #[test]
    fn bad_type_names_file_and_line() {
        let bad = FIG2.replace("type='uint64' description='kernel", "type='u64' description='kernel");
        let err = parse(&[("f.xml", &bad)]).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].to_string(), "f.xml:8: unknown field type 'u64'");
    }

    // Each problem is reported, not only the first: list without eltType, duplicate field, name mismatch.
    #[test]
    fn several_errors_reported() {
        let bad = FIG2
            .replace(" eltType='uint64'", "")
            .replace("name='threadId'", "name='pc'")
            .replace("HW::HWPerf::HPMsAndPC'", "HW::X::HPMsAndPC'");
        let msgs: Vec<String> = parse(&[("f.xml", &bad)]).unwrap_err().0.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "f.xml:8: field 'pc' appears twice",
                "f.xml:9: a field of type 'list' needs eltType",
                "f.xml:2: event name 'HW::X::HPMsAndPC' does not match its layerId::classId::specifier 'HW::HWPerf::HPMsAndPC'"
            ]
        );
    }

    // The name must equal layer::class::specifier (line of the <event>).
    #[test]
    fn name_mismatch() {
        let bad = FIG2.replace("HW::HWPerf::HPMsAndPC'", "HW::X::HPMsAndPC'");
        let err = parse(&[("f.xml", &bad)]).unwrap_err();
        assert_eq!(
            err.0[0].to_string(),
            "f.xml:2: event name 'HW::X::HPMsAndPC' does not match its layerId::classId::specifier 'HW::HWPerf::HPMsAndPC'"
        );
    }

    // Malformed XML reports the parser's line; ids below 16 and clashes across files are rejected.
    #[test]
    fn malformed_and_ids() {
        let err = parse(&[("m.xml", "<events name='x'>\n<event>\n</events>")]).unwrap_err();
        assert_eq!(err.0[0].line, 3);
        assert!(err.0[0].message.starts_with("not well-formed XML"));
        let low = FIG2.replace("<event name", "<event id='3' name");
        assert_eq!(parse(&[("f.xml", &low)]).unwrap_err().0[0].message, "id '3' is not an integer in 16..=65535");
        let err = parse(&[("a.xml", FIG2), ("b.xml", FIG2)]).unwrap_err();
        assert!(err.0[0].message.starts_with("event id 16 used by both"), "{}", err.0[0]);
    }

    // An event whose largest record would not fit the record size limit is rejected.
    #[test]
    fn too_large_event_rejected() {
        let fields: String = (0..20).map(|i| format!("<field name='s{i}' type='string' description='d'/>")).collect();
        let text = format!("<events name='x'><event name='A::B::C' description='d'><layerId value='A'/><classId value='B'/><specifier value='C'/><fields>{fields}</fields></event></events>");
        let err = parse(&[("x.xml", &text)]).unwrap_err();
        assert!(err.0[0].message.starts_with("event A::B::C can reach 20536 bytes"), "{}", err.0[0]);
    }

    // Stub names: camel case and acronyms become snake case.
    #[test]
    fn snake_case() {
        assert_eq!(snake("PageFault"), "page_fault");
        assert_eq!(snake("HWPerf"), "hwperf");
        assert_eq!(snake("OS"), "os");
        assert_eq!(snake("sched_switch"), "sched_switch");
    }
}
