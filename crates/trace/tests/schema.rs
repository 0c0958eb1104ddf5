//! The shipped XSD and spec.rs agree: xmllint accepts Loupe's spec against
//! schema/loupe-events.xsd, and a spec broken in each of several ways is
//! rejected by both. XSD 1.0 cannot state co-occurrence rules (a list needs
//! eltType; the name is layerId::classId::specifier); spec.rs checks those
//! alone, and the test pins that too.

use std::path::Path;
use std::process::Command;

fn xmllint(xml: &Path) -> bool {
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/loupe-events.xsd");
    let out = Command::new("xmllint").arg("--noout").arg("--schema").arg(xsd).arg(xml).output();
    out.expect("xmllint (libxml2-utils, installed by scripts/setup.sh)").status.success()
}

// See the file comment.
#[test]
fn xsd_and_validator_agree() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("spec/loupe.xml");
    assert!(xmllint(&spec));
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(loupe_trace::spec::parse(&[("loupe.xml", &text)]).is_ok());
    let breakages = [
        ("type=\"uint32\"", "type=\"u32\""),
        ("<classId value=\"Memory\"/>", ""),
        ("name=\"tid\" type=\"uint32\" description=\"faulting thread\"", "name=\"tid\" type=\"uint32\""),
        ("id=\"33\"", "id=\"32\""),
        ("name=\"address\"", "name=\"tid\""),
        ("id=\"16\"", "id=\"3\""),
        ("<layerId value=\"OS\"/>", "<layerId value=\"O S\"/>"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (from, to) in breakages {
        assert!(text.contains(from), "{from}");
        let bad = text.replacen(from, to, 1);
        let p = dir.path().join("bad.xml");
        std::fs::write(&p, &bad).unwrap();
        assert!(!xmllint(&p), "xmllint accepted: {from} -> {to}");
        assert!(loupe_trace::spec::parse(&[("bad.xml", &bad)]).is_err(), "spec.rs accepted: {from} -> {to}");
    }
    for (from, to) in [("eltType=\"uint64\" ", ""), ("name=\"OS::Block::Issue\"", "name=\"OS::Block::Other\"")] {
        let bad = text.replacen(from, to, 1);
        let p = dir.path().join("co.xml");
        std::fs::write(&p, &bad).unwrap();
        assert!(xmllint(&p), "XSD 1.0 now rejects {from}: update the comment");
        assert!(loupe_trace::spec::parse(&[("co.xml", &bad)]).is_err(), "spec.rs accepted: {from} -> {to}");
    }
}
