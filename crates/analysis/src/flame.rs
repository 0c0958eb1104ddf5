//! Flame graphs: the collapsed stacks drawn by inferno (a Rust port of
//! flamegraph.pl) as an interactive SVG (click to zoom, Ctrl-F to search),
//! optionally wrapped in an HTML page.

use crate::callgraph::CallData;
use crate::export::collapsed;

/// An interactive SVG of `event`'s stacks, inlined functions expanded.
pub fn svg(data: &CallData, event: usize, title: &str) -> Result<Vec<u8>, String> {
    let folded = collapsed(data, event, true);
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_string();
    opt.count_name = "samples".into();
    opt.subtitle = Some(subtitle(data, event));
    let mut out = Vec::new();
    if folded.is_empty() {
        return Err("no stacks in the selection".into());
    }
    inferno::flamegraph::from_lines(&mut opt, folded.lines(), &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// What the graph holds, and how many stacks stopped early.
fn subtitle(data: &CallData, event: usize) -> String {
    let (total, cut) = (data.totals[event], data.truncated[event]);
    let pct = if total > 0 { 100.0 * cut as f64 / total as f64 } else { 0.0 };
    format!(
        "{} samples of {}; {cut} ({pct:.1}%) unwinds stopped before the root, shown under [unwind stopped]",
        total, data.events[event].0
    )
}

/// The SVG embedded in a minimal HTML page (it stays interactive). Its
/// script removes the SVG's width to follow the window; inline in HTML an
/// SVG without one is drawn 300 pixels wide, so the page's style sets it.
pub fn html(data: &CallData, event: usize, title: &str) -> Result<Vec<u8>, String> {
    let svg = svg(data, event, title)?;
    let svg = String::from_utf8_lossy(&svg);
    let body = svg.find("<svg").map_or(&svg[..], |i| &svg[i..]);
    let esc = title.replace('&', "&amp;").replace('<', "&lt;");
    Ok(format!("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{esc}</title>\n<style>svg {{ display: block; width: 100%; }}</style></head>\n<body style=\"margin:0\">\n{body}\n</body></html>\n").into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callgraph::tests::data;

    #[test]
    fn svg_has_a_box_per_frame_and_the_truncation_count() {
        // Checks that inferno drew every procedure (and the inlined one) and the subtitle counts truncation.
        let d = data(&|p| p.pid == 1);
        let s = String::from_utf8(svg(&d, 0, "t").unwrap()).unwrap();
        for name in ["main", "a", "b", "c", "d", "inl (inlined)", "[unwind stopped]"] {
            assert!(s.contains(&format!(">{name}<")) || s.contains(&format!("<title>{name} (")), "{name} missing");
        }
        assert!(s.contains("1 (9.1%) unwinds stopped"));
        let page = String::from_utf8(html(&d, 0, "t").unwrap()).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        // The page, not the SVG's fixed width, sizes the graph: it fills the window.
        assert!(page.contains("svg { display: block; width: 100%; }"), "{page}");
    }
}
