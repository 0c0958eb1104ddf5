//! The report's strips as a PNG (for viewers and documents that take no
//! SVG): the same layout as [`crate::render::svg`], one band per series with
//! its per-interval values as bars, iteration starts as red lines, labels in a
//! built-in 3x5 pixel font drawn at twice its size. Pure: returns the bytes.

use crate::report::Report;

const WIDTH: usize = 1000;
const LEFT: usize = 200;
const BAND: usize = 70;
const WHITE: [u8; 3] = [255, 255, 255];
const BAR: [u8; 3] = [70, 130, 180];
const MARK: [u8; 3] = [230, 90, 90];
const INK: [u8; 3] = [0, 0, 0];

/// 3x5 glyphs, rows top to bottom, three bits per row (left pixel highest).
const FONT: &[(char, u16)] = &[
    ('A', 0b010_101_111_101_101),
    ('B', 0b110_101_110_101_110),
    ('C', 0b011_100_100_100_011),
    ('D', 0b110_101_101_101_110),
    ('E', 0b111_100_110_100_111),
    ('F', 0b111_100_110_100_100),
    ('G', 0b011_100_101_101_011),
    ('H', 0b101_101_111_101_101),
    ('I', 0b111_010_010_010_111),
    ('J', 0b001_001_001_101_010),
    ('K', 0b101_101_110_101_101),
    ('L', 0b100_100_100_100_111),
    ('M', 0b101_111_111_101_101),
    ('N', 0b110_101_101_101_101),
    ('O', 0b010_101_101_101_010),
    ('P', 0b110_101_110_100_100),
    ('Q', 0b010_101_101_110_011),
    ('R', 0b110_101_110_101_101),
    ('S', 0b011_100_010_001_110),
    ('T', 0b111_010_010_010_010),
    ('U', 0b101_101_101_101_111),
    ('V', 0b101_101_101_101_010),
    ('W', 0b101_101_111_111_101),
    ('X', 0b101_101_010_101_101),
    ('Y', 0b101_101_010_010_010),
    ('Z', 0b111_001_010_100_111),
    ('0', 0b111_101_101_101_111),
    ('1', 0b010_110_010_010_111),
    ('2', 0b110_001_010_100_111),
    ('3', 0b110_001_010_001_110),
    ('4', 0b101_101_111_001_001),
    ('5', 0b111_100_110_001_110),
    ('6', 0b011_100_111_101_111),
    ('7', 0b111_001_010_010_010),
    ('8', 0b111_101_111_101_111),
    ('9', 0b111_101_111_001_110),
    (':', 0b000_010_000_010_000),
    ('-', 0b000_000_111_000_000),
    ('_', 0b000_000_000_000_111),
    ('.', 0b000_000_000_000_010),
    ('(', 0b001_010_010_010_001),
    (')', 0b100_010_010_010_100),
    ('/', 0b001_001_010_100_100),
];

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.w && y < self.h {
            let i = 3 * (y * self.w + x);
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Text at (x, y), each font pixel drawn 2x2; unknown characters are blank.
    fn text(&mut self, x: usize, y: usize, s: &str) {
        for (k, ch) in s.chars().enumerate() {
            let bits = FONT.iter().find(|(c, _)| *c == ch.to_ascii_uppercase()).map_or(0, |g| g.1);
            for row in 0..5 {
                for col in 0..3 {
                    if bits >> (14 - (row * 3 + col)) & 1 == 1 {
                        let (px, py) = (x + k * 8 + 2 * col, y + 2 * row);
                        for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                            self.set(px + dx, py + dy, INK);
                        }
                    }
                }
            }
        }
    }
}

/// The strips as PNG bytes: `LEFT` + 1000 pixels wide, 70 pixels per series.
pub fn png(r: &Report) -> Vec<u8> {
    let n = r.series.first().map_or(1, |s| s.values.len()).max(1);
    let (w, h) = (LEFT + WIDTH, BAND * r.series.len() + 20);
    let mut c = Canvas { w, h, px: WHITE.repeat(w * h) };
    for it in &r.iterations {
        let x = LEFT + (WIDTH as f64 * ((it.begin - r.t0) as f64 / r.bucket_ns as f64) / n as f64) as usize;
        (0..h).for_each(|y| c.set(x, y, MARK));
    }
    for (i, s) in r.series.iter().enumerate() {
        let y0 = 10 + BAND * i;
        let base = y0 + BAND - 10;
        let max = s.values.iter().copied().fold(0.0, f64::max).max(1e-9);
        for x in 0..WIDTH {
            // The largest value among the intervals this pixel column covers.
            let (a, b) = (x * n / WIDTH, ((x + 1) * n / WIDTH).max(x * n / WIDTH + 1));
            let v = s.values[a..b.min(n)].iter().copied().fold(0.0, f64::max);
            let bar = ((BAND - 20) as f64 * v / max).round() as usize;
            (0..bar).for_each(|d| c.set(LEFT + x, base - 1 - d, BAR));
        }
        c.text(4, y0 + BAND / 2 - 5, &s.name);
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    // Writing into a Vec cannot fail.
    let mut wr = enc.write_header().expect("png header");
    wr.write_image_data(&c.px).expect("png data");
    wr.finish().expect("png end");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Iteration, Series};

    // Decoded back: the size follows the layout; a series with one nonzero interval of 10 has a full-height
    // bar over exactly that interval's pixel columns and nothing elsewhere; the iteration start is a red column.
    #[test]
    fn png_strips() {
        let mut values = vec![0.0; 100];
        values[50] = 10.0;
        let r = Report {
            t0: 1000,
            bucket_ns: 10,
            series: vec![Series { name: "page-faults".into(), values }],
            iterations: vec![Iteration { phase: 1, iteration: 0, begin: 1000 + 10 * 20, end: 1000 + 10 * 30 }],
            correlation: vec![],
            active: 100,
            per_phase: vec![],
            periods: vec![None],
            median_iteration: None,
            peak_position: vec![None],
        };
        let bytes = png(&r);
        let mut dec = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
        let mut px = vec![0; dec.output_buffer_size()];
        dec.next_frame(&mut px).unwrap();
        let (w, h) = (LEFT + WIDTH, BAND + 20);
        assert_eq!(px.len(), 3 * w * h);
        let at = |x: usize, y: usize| [px[3 * (y * w + x)], px[3 * (y * w + x) + 1], px[3 * (y * w + x) + 2]];
        let row = 10 + BAND - 11; // the bottom pixel row of the bars
        let bars: Vec<usize> = (0..WIDTH).filter(|&x| at(LEFT + x, row) == BAR).collect();
        assert_eq!(bars, (500..510).collect::<Vec<_>>());
        assert_eq!(at(LEFT + 505, row + 1 - (BAND - 20)), BAR);
        assert_eq!(at(LEFT + 505, row - (BAND - 20)), WHITE);
        assert!((0..h).all(|y| at(LEFT + 200, y) == MARK));
        // The label is drawn in the left margin.
        assert!((0..LEFT).any(|x| (10..10 + BAND).any(|y| at(x, y) == INK)));
    }
}
