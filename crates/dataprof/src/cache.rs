//! Cache geometry from /sys/devices/system/cpu/cpu0/cache/index*.

use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Geometry {
    pub level: u32,
    /// "Data", "Unified" (instruction caches are left out).
    pub kind: String,
    pub size: u64,
    pub ways: u32,
    pub line: u32,
    pub sets: u32,
}

impl Geometry {
    pub fn set_of(&self, addr: u64) -> u32 {
        ((addr / self.line as u64) % self.sets.max(1) as u64) as u32
    }

    /// Whether virtual addresses give the set (the index bits lie inside
    /// the 4 KiB page offset, as for a VIPT L1).
    pub fn virtually_indexed(&self) -> bool {
        self.sets as u64 * self.line as u64 <= 4096
    }
}

/// "48K", "32768K", "1M" -> bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        b'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

impl Geometry {
    pub fn read_sysfs() -> Vec<Geometry> {
        read_dir(Path::new("/sys/devices/system/cpu/cpu0/cache"))
    }

    /// First data-holding cache of `level` (1 = L1d).
    pub fn level(caches: &[Geometry], level: u32) -> Option<&Geometry> {
        caches.iter().find(|c| c.level == level)
    }

    /// The last level cache.
    pub fn last(caches: &[Geometry]) -> Option<&Geometry> {
        caches.iter().max_by_key(|c| c.level)
    }
}

pub fn read_dir(dir: &Path) -> Vec<Geometry> {
    let mut out = Vec::new();
    for i in 0..16 {
        let d = dir.join(format!("index{i}"));
        let get = |f: &str| std::fs::read_to_string(d.join(f)).ok().map(|s| s.trim().to_string());
        let Some(kind) = get("type") else { continue };
        if kind == "Instruction" {
            continue;
        }
        let g = (|| {
            Some(Geometry {
                level: get("level")?.parse().ok()?,
                size: parse_size(&get("size")?)?,
                ways: get("ways_of_associativity")?.parse().ok()?,
                line: get("coherency_line_size")?.parse().ok()?,
                sets: get("number_of_sets")?.parse().ok()?,
                kind: kind.clone(),
            })
        })();
        out.extend(g);
    }
    out.sort_by_key(|g| g.level);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_sets() {
        // Checks size suffixes and that a 48 KiB 12-way L1 with 64 sets maps addresses 4 KiB apart to one set.
        assert_eq!(parse_size("48K"), Some(48 * 1024));
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("x"), None);
        let l1 = Geometry { level: 1, kind: "Data".into(), size: 48 << 10, ways: 12, line: 64, sets: 64 };
        assert_eq!(l1.set_of(0x1000), l1.set_of(0x5000));
        assert_eq!(l1.set_of(0x1040), 1);
        assert!(l1.virtually_indexed());
    }

    #[test]
    fn reads_a_sysfs_tree() {
        // Checks index directories are read, instruction caches skipped, and the result sorted by level.
        let d = tempfile::tempdir().unwrap();
        for (i, (lvl, kind, size, ways, sets)) in
            [(2, "Unified", "1024K", "16", "1024"), (1, "Instruction", "32K", "8", "64"), (1, "Data", "48K", "12", "64")].iter().enumerate()
        {
            let x = d.path().join(format!("index{i}"));
            std::fs::create_dir_all(&x).unwrap();
            for (f, v) in [
                ("level", lvl.to_string()),
                ("type", kind.to_string()),
                ("size", size.to_string()),
                ("ways_of_associativity", ways.to_string()),
                ("coherency_line_size", "64".into()),
                ("number_of_sets", sets.to_string()),
            ] {
                std::fs::write(x.join(f), v + "\n").unwrap();
            }
        }
        let g = read_dir(d.path());
        assert_eq!(g.iter().map(|g| (g.level, g.sets)).collect::<Vec<_>>(), vec![(1, 64), (2, 1024)]);
    }
}
